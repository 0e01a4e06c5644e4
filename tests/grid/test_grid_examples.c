/* tests/grid/test_grid_examples.c - every configuration of Megatron's
 * examples (tests/data/megatron/rank_groups.json, made by running
 * core_v0.18.0's initialize_model_parallel) gives exactly its groups: the
 * same group names in the same creation order, the same lists in the same
 * order, the same derived sizes and generator orders; every invalid example
 * is refused with a message containing Megatron's. */
#include <stdlib.h>
#include <string.h>

#include "example_json.h"
#include "grid/grid.h"
#include "test.h"

static int get_int(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

static void config_from(mtc_grid_config *c, const cJSON *args) {
    mtc_grid_config_default(c);
    c->world_size = get_int(args, "world_size", 1);
    c->tp = get_int(args, "tensor_model_parallel_size", 1);
    c->pp = get_int(args, "pipeline_model_parallel_size", 1);
    c->cp = get_int(args, "context_parallel_size", 1);
    c->ep = get_int(args, "expert_model_parallel_size", 1);
    c->etp = get_int(args, "expert_tensor_parallel_size", 0); /* null = None */
    c->num_dist_opt_instances = get_int(args, "num_distributed_optimizer_instances", 1);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(args, "order");
    c->order = cJSON_IsString(o) ? o->valuestring : NULL;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(args, "hierarchical_context_parallel_sizes");
    if (cJSON_IsArray(h))
        for (const cJSON *x = h->child; x && c->n_hcp < MTC_GRID_MAX_HCP; x = x->next)
            c->hcp[c->n_hcp++] = x->valueint;
}

static void check_generator(const mtc_grid_gen *g, const cJSON *jg, const char *id) {
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(jg, "ordered_size");
    int i = 0;
    for (const cJSON *x = os ? os->child : NULL; x; x = x->next, i++)
        T_CHECKF(i < MTC_DIM_COUNT && g->size[i] == x->valueint, "%s ordered_size[%d]", id, i);
    T_CHECKF(i == MTC_DIM_COUNT, "%s: %d ordered sizes", id, i);
}

static void check_config(const cJSON *cfgj) {
    const char *id = cJSON_GetObjectItemCaseSensitive(cfgj, "id")->valuestring;
    mtc_grid_config c;
    config_from(&c, cJSON_GetObjectItemCaseSensitive(cfgj, "args"));
    mtc_grid_spec s;
    mtc_result_t rc = mtc_grid_spec_init(&s, &c);
    T_CHECKF(rc == MTC_OK, "%s: %s", id, mtc_error_detail());
    if (rc != MTC_OK) return;
    const cJSON *der = cJSON_GetObjectItemCaseSensitive(cfgj, "derived");
    T_CHECKF(s.dp == get_int(der, "data_parallel_size", -1), "%s dp %d", id, s.dp);
    T_CHECKF(s.edp == get_int(der, "expert_data_parallel_size", -1), "%s edp %d", id, s.edp);
    const cJSON *gens = cJSON_GetObjectItemCaseSensitive(der, "generators");
    if (cJSON_GetArraySize(gens) == 2) {
        check_generator(&s.dense, cJSON_GetArrayItem(gens, 0), id);
        check_generator(&s.expert, cJSON_GetArrayItem(gens, 1), id);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(gens, 0), "order");
        T_CHECKF(cJSON_IsString(o) && !strcmp(o->valuestring, s.order_full), "%s order %s", id,
                 s.order_full);
    }
    mtc_grid_groups G;
    T_CHECK(mtc_grid_groups_build(&G, &s) == MTC_OK);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(cfgj, "groups");
    int si = 0;
    for (const cJSON *kind = groups->child; kind; kind = kind->next, si++) {
        T_CHECKF(si < G.nsets, "%s: missing %s", id, kind->string);
        if (si >= G.nsets) break;
        const mtc_grid_group_set *set = &G.sets[si];
        T_CHECKF(!strcmp(set->name, kind->string), "%s: set %d is %s, expected %s", id, si,
                 set->name, kind->string);
        T_CHECKF(cJSON_GetArraySize(kind) == set->count, "%s %s: %d groups vs %d", id, kind->string,
                 set->count, cJSON_GetArraySize(kind));
        int g = 0, bad = 0;
        for (const cJSON *list = kind->child; list && g < set->count; list = list->next, g++) {
            bad |= cJSON_GetArraySize(list) != set->size;
            int k = 0;
            for (const cJSON *r = list->child; r && k < set->size; r = r->next, k++)
                bad |= r->valueint != set->ranks[g * set->size + k];
        }
        T_CHECKF(!bad, "%s %s: lists differ", id, kind->string);
    }
    T_CHECKF(si == G.nsets, "%s: we build %d kinds, Megatron %d", id, G.nsets, si);
    mtc_grid_groups_free(&G);
}

static void check_invalid(const cJSON *inv) {
    mtc_grid_config c;
    config_from(&c, cJSON_GetObjectItemCaseSensitive(inv, "args"));
    const char *msg = cJSON_GetObjectItemCaseSensitive(inv, "message")->valuestring;
    mtc_grid_spec s;
    mtc_error_clear();
    mtc_result_t rc = mtc_grid_spec_init(&s, &c);
    T_CHECKF(rc == MTC_ERR_INVALID_ARGUMENT, "accepted a config Megatron refuses: %s", msg);
    T_CHECKF(strstr(mtc_error_detail(), msg) != NULL, "\n  ours:     %s\n  Megatron: %s",
             mtc_error_detail(), msg);
    T_CHECKF(!strchr(mtc_error_detail(), '\n'), "message is not one line: %s", mtc_error_detail());
}

int main(void) {
    cJSON *root = load_example("rank_groups.json");
    T_CHECK(root != NULL);
    if (!root) return T_DONE();
    int nc = 0, ni = 0;
    const cJSON *configs = cJSON_GetObjectItemCaseSensitive(root, "configs");
    for (const cJSON *c = configs ? configs->child : NULL; c; c = c->next, nc++)
        check_config(c);
    const cJSON *invalid = cJSON_GetObjectItemCaseSensitive(root, "invalid");
    for (const cJSON *c = invalid ? invalid->child : NULL; c; c = c->next, ni++)
        check_invalid(c);
    T_CHECKF(nc > 0 && ni > 0, "%d configs, %d invalid examples", nc, ni);
    printf("%d example configs, %d invalid examples\n", nc, ni);
    cJSON_Delete(root);
    return T_DONE();
}
