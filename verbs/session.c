/* session.c - session ids, the listener's registry of sessions and the
 * verdict on a (re-)dial, shared by the transports.  See session.h. */
#include "verbs/session.h"

#include "verbs/auth.h"

dc_status_t dc_session_start(dc_session_t *s, uint32_t first)
{
    uint8_t rnd[DC_AUTH_NONCE_SIZE];
    dc_status_t st = dc_auth_nonce(rnd);
    if (st != DC_OK)
        return st;
    s->id = dc_load_le64(rnd);
    s->epoch = first;
    return DC_OK;
}

void dc_session_add(dc_session_t **head, dc_session_t *s)
{
    s->next = *head;
    *head = s;
}

void dc_session_remove(dc_session_t **head, dc_session_t *s)
{
    for (dc_session_t **pp = head; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            return;
        }
}

dc_session_t *dc_session_find(dc_session_t *head, uint64_t id,
                              bool (*usable)(const dc_session_t *s))
{
    for (dc_session_t *s = head; s; s = s->next)
        if (s->id == id && (!usable || usable(s)))
            return s;
    return NULL;
}

dc_session_verdict_t dc_session_judge(const dc_session_t *held, uint32_t epoch, uint32_t first,
                                      bool join)
{
    if (!held)
        return epoch == first ? DC_SESSION_NEW : DC_SESSION_UNKNOWN;
    if (!join && epoch == first)
        return DC_SESSION_DUP;
    if (epoch < held->epoch || (epoch == held->epoch && !join))
        return DC_SESSION_STALE;
    return epoch == held->epoch ? DC_SESSION_JOIN : DC_SESSION_RESUME;
}

const char *dc_session_verdict_str(dc_session_verdict_t v)
{
    switch (v) {
    case DC_SESSION_NEW: return "new session";
    case DC_SESSION_JOIN: return "another stream of the session";
    case DC_SESSION_RESUME: return "re-dial of the session";
    case DC_SESSION_UNKNOWN: return "re-dial of an unknown session";
    case DC_SESSION_STALE: return "stale epoch";
    case DC_SESSION_DUP: return "new connection with a session in use";
    }
    return "refused";
}
