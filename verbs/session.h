/*
 * session.h - the session bookkeeping behind reconnect and resume, shared
 * by the transports (verbs/; transport.h, "Hop reliability").
 *
 * A client picks a random 64-bit session id when it connects and dials with
 * an epoch: `first` on the first dial (tcp 0, rdma and ucx 1), one more on
 * every re-dial.  A listener keeps the connections it accepted in a registry
 * (a list of dc_session_t embedded in them) and judges every incoming dial
 * by its session and epoch (dc_session_judge):
 *
 *   no such session   epoch == first  NEW      a new connection
 *                     otherwise       UNKNOWN  refuse: the client gives up
 *   session S, epoch  < S.epoch       STALE    refuse: an old attempt
 *                     == S.epoch      JOIN     one more stream of the same
 *                                              dial (tcp's K streams), or
 *                                              STALE where a dial is one link
 *                     > S.epoch       RESUME   hand the new link to S,
 *                                              re-send what is un-ACKed
 *   a dial with epoch == first of a session in use, where a dial is one
 *   link (rdma, ucx):                 DUP      refuse
 *
 * The registry is an intrusive singly-linked list: the transport embeds a
 * dc_session_t in its connection and gets from a session back to the
 * connection with DC_SESSION_OWNER().  Nothing here allocates or locks.
 */
#ifndef DC_VERBS_SESSION_H
#define DC_VERBS_SESSION_H

#include "util/dc_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dc_session {
    uint64_t id;             /**< random, chosen by the client */
    uint32_t epoch;          /**< dial count (see above) */
    struct dc_session *next; /**< registry link (listener side) */
} dc_session_t;

/** The struct of type `type` whose member `member` is the session `s`. */
#define DC_SESSION_OWNER(s, type, member) ((type *)(void *)((char *)(s) - offsetof(type, member)))

/** A client's new session: a random id (auth.h's nonce source), epoch
 *  `first`.  Writes `*s` only on success. */
dc_status_t dc_session_start(dc_session_t *s, uint32_t first);

/** Add `s` at the head of the registry `*head`. */
void dc_session_add(dc_session_t **head, dc_session_t *s);
/** Unlink `s` from the registry `*head` (no-op if absent). */
void dc_session_remove(dc_session_t **head, dc_session_t *s);
/** The first session `id` in the registry for which `usable` (NULL: any)
 *  holds; NULL if none. */
dc_session_t *dc_session_find(dc_session_t *head, uint64_t id,
                              bool (*usable)(const dc_session_t *s));

typedef enum {
    DC_SESSION_NEW = 0, /**< a new session: accept it */
    DC_SESSION_JOIN,    /**< the current epoch again: another stream of it */
    DC_SESSION_RESUME,  /**< a higher epoch: the re-dial of a broken link */
    DC_SESSION_UNKNOWN, /**< a re-dial of a session not held (or failed) */
    DC_SESSION_STALE,   /**< an epoch not above the session's */
    DC_SESSION_DUP,     /**< a first dial with a session id in use */
} dc_session_verdict_t;

/**
 * Judge a dial of epoch `epoch` given `held`, the live session of the same
 * id (NULL: none, or it failed).  `first`: the epoch of a first dial.
 * `join`: a dial may bring several streams of one epoch (tcp); without it
 * the current epoch again is STALE and a first dial of a held id DUP.
 */
dc_session_verdict_t dc_session_judge(const dc_session_t *held, uint32_t epoch, uint32_t first,
                                      bool join);

/** "new", "stale epoch", ... for log lines. */
const char *dc_session_verdict_str(dc_session_verdict_t v);

#endif /* DC_VERBS_SESSION_H */
