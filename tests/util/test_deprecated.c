/* The 0.1 names the header keeps for 0.2 callers (the library itself is
 * built with DC_NO_DEPRECATED, so only this file sees them). */
#undef DC_NO_DEPRECATED
#include "deltacast.h"

#include <criterion/criterion.h>

Test(deprecated, names_of_0_1_are_the_0_2_ones)
{
    cr_assert_eq(sizeof(dc_tree_options_t), sizeof(dc_tree_opts_t));
    cr_assert_eq(sizeof(dc_sim_params_t), sizeof(dc_sim_opts_t));
    cr_assert_eq(sizeof(dc_refit_node_config_t), sizeof(dc_refit_node_opts_t));
    cr_assert_eq(DC_LAYOUT_SIMD, DC_DELTA_LAYOUT_SIMD);
    cr_assert_eq(DC_LAYOUT_COMPACT, DC_DELTA_LAYOUT_COMPACT);
    cr_assert_eq(DC_TOPO_RECEIVER, DC_TOPO_ROLE_RECEIVER);
    cr_assert_eq(DC_TOPO_SENDER, DC_TOPO_ROLE_SENDER);
    cr_assert_eq(DC_EDGE_LAN, DC_TREE_EDGE_KIND_LAN);
    cr_assert_eq(DC_EDGE_WAN, DC_TREE_EDGE_KIND_WAN);
    cr_assert_eq(DC_TREE_TEXT, DC_TREE_FORMAT_TEXT);
    cr_assert_eq(DC_TREE_JSON, DC_TREE_FORMAT_JSON);
    cr_assert_eq(DC_TREE_DOT, DC_TREE_FORMAT_DOT);
    cr_assert_neq(DC_TREE_FORMAT_JSON, DC_TREE_FORMAT_DOT);
}
