/* grid/grid.h - Megatron-LM core_v0.18.0's rank generation: the dense
 * (tp, cp, dp, pp) and expert (etp, ep, edp, pp) generators sharing one
 * `order` string, the validation initialize_model_parallel does, every
 * process group it builds (names, group order and rank order as Megatron's),
 * and the per-rank grid object holding one communicator per group.
 *
 * Three layers:
 *   mtc_grid_spec   validated, resolved configuration (pure; no communicator),
 *                   with the coordinate helpers (rank <-> digits, pp next/prev);
 *   mtc_grid_groups every group of every kind, as rank lists (pure);
 *   mtc_grid_t      one rank's view: coordinates and a communicator per group,
 *                   built collectively with mtc_comm_split (grid.c).
 * Not here: the model-level meaning of groups (which gradient goes where) and
 * the rendering of tables/JSON (cli/cmd_ranks.c); the SVG is in grid/svg.c.
 *
 * Coordinates: the first token of `order` varies fastest,
 * rank = sum_i digit_i * stride_i, stride_i = prod_{j<i} size_j. A rank's index
 * in a group is its position in the sorted rank list; every list is built
 * sorted except INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP, kept in
 * Megatron's (unsorted) creation order. */
#ifndef MTC_GRID_GRID_H
#define MTC_GRID_GRID_H

#include <stdio.h>

#include "comm/comm.h"
#include "core/result.h"

#define MTC_GRID_ORDER_DEFAULT "tp-cp-ep-dp-pp"
#define MTC_GRID_ORDER_MAX 64        /* characters of an order string */
#define MTC_GRID_MAX_HCP 8           /* levels of hierarchical context parallelism */
#define MTC_GRID_MAX_WORLD (1 << 20) /* ranks of one job */

/* What the user asks for, with Megatron's defaults spelled as 0/NULL. */
typedef struct {
    int world_size;
    int tp, pp, cp, ep;
    int etp;                    /* 0: same as tp (Megatron's None) */
    int vpp;                    /* 0: no interleaved schedule (Megatron's None) */
    const char *order;          /* NULL: MTC_GRID_ORDER_DEFAULT */
    int num_dist_opt_instances; /* 0 or 1: a single distributed-optimizer instance */
    int n_hcp;                  /* 0: no hierarchical context-parallel groups */
    int hcp[MTC_GRID_MAX_HCP];  /* --hierarchical-context-parallel-sizes */
    /* Megatron's standalone MTP stage (pp/layout.h): 1 + its pipeline rank,
     * whose wte copy joins EMBEDDING_GROUP (pretrain_gpt.py
     * get_embedding_ranks: first, the MTP rank, and the last unless
     * embd_untied), 0: [first, last] */
    int embd_mtp_rank;
    int embd_untied; /* --untie-embeddings-and-output-weights (with embd_mtp_rank) */
} mtc_grid_config;

/* Megatron's name_to_size dict order (matters for error precedence). */
typedef enum {
    MTC_DIM_TP = 0,
    MTC_DIM_PP,
    MTC_DIM_DP,
    MTC_DIM_EP,
    MTC_DIM_CP,
    MTC_DIM_COUNT
} mtc_grid_dim_t;

/* One RankGenerator: dimension at each order position (first = fastest). */
typedef struct {
    int dim[MTC_DIM_COUNT];    /* order position -> mtc_grid_dim_t */
    int size[MTC_DIM_COUNT];   /* ordered_size */
    int stride[MTC_DIM_COUNT]; /* prefix products of size */
    int pos[MTC_DIM_COUNT];    /* mtc_grid_dim_t -> order position */
} mtc_grid_gen;

/* A validated configuration. */
typedef struct {
    mtc_grid_config cfg;            /* etp, nd and order resolved; cfg.order points at order[] */
    char order[MTC_GRID_ORDER_MAX]; /* as the user gave it */
    char order_full[MTC_GRID_ORDER_MAX + 16]; /* lower-cased, missing size-1 tokens appended */
    int dp, edp;                              /* data_parallel_size, expert_data_parallel_size */
    int nd;                                   /* distributed-optimizer instances (>= 1) */
    mtc_grid_gen dense;                       /* RankGenerator(tp, ep=1, dp, pp, cp) */
    mtc_grid_gen expert;                      /* RankGenerator(etp, ep, edp, pp, cp=1) */
} mtc_grid_spec;

/* A rank's coordinates; each is also its index in the matching sorted group. */
typedef struct {
    int rank;
    int tp, cp, dp, pp; /* dense generator */
    int etp, ep, edp;   /* expert generator (its pp digit equals pp) */
    int dp_cp;          /* index in DATA_PARALLEL_GROUP_WITH_CP */
    int vpp;            /* virtual pipeline size (1 when none) */
} mtc_grid_coord;

void mtc_grid_config_default(mtc_grid_config *cfg); /* all sizes 1, world 1 */

/* Validate as initialize_model_parallel does (its checks that apply outside
 * PyTorch, in its order) and resolve. Errors: MTC_ERR_INVALID_ARGUMENT with a
 * one-line detail containing Megatron's own message, the values and the
 * nearest valid choices. */
mtc_result_t mtc_grid_spec_init(mtc_grid_spec *out, const mtc_grid_config *cfg);

/* Model-level rules later layers need (0 = not applicable):
 * heads % tp, seq_length % (2*cp) when cp > 1, num_experts % ep,
 * num_layers % (pp*vpp) (vpp 0 or 1: num_layers % pp). */
mtc_result_t mtc_grid_validate_model(const mtc_grid_spec *s, int heads, int seq_length,
                                     int num_experts, int num_layers, int vpp);

/* Megatron training's start-up line (arguments.py), e.g. "using world size:
 * 8, data-parallel size: 2, context-parallel size: 1, hierarchical
 * context-parallel sizes: None, tensor-model-parallel size: 2,
 * pipeline-model-parallel size: 2", for log parsers. */
void mtc_grid_describe(char *buf, size_t len, const mtc_grid_spec *s);

/* Coordinates of `rank` (0 <= rank < world). */
void mtc_grid_coord_of(mtc_grid_coord *out, const mtc_grid_spec *s, int rank);
/* Rank from dense digits / expert digits. */
int mtc_grid_rank_dense(const mtc_grid_spec *s, int tp, int cp, int dp, int pp);
int mtc_grid_rank_expert(const mtc_grid_spec *s, int etp, int ep, int edp, int pp);
/* Pipeline neighbours (ring: next of the last stage is the first). */
int mtc_grid_pp_next(const mtc_grid_spec *s, int rank);
int mtc_grid_pp_prev(const mtc_grid_spec *s, int rank);
int mtc_grid_is_first_stage(const mtc_grid_spec *s, int rank);
int mtc_grid_is_last_stage(const mtc_grid_spec *s, int rank);

/* Megatron's generate_masked_orthogonal_rank_groups on one generator:
 * `token` like "tp-dp" selects the masked dimensions. out receives
 * ngroups*group_size ranks (caller-sized: world). Returns group_size, or -1
 * for an unknown token. */
int mtc_grid_gen_ranks(int *out, int *ngroups, const mtc_grid_gen *g, int world, const char *token);

/* ---- every group ------------------------------------------------------ */

typedef enum {
    MTC_GROUP_DP_CP = 0,           /* DATA_PARALLEL_GROUP_WITH_CP */
    MTC_GROUP_INTRA_PARTIAL_DP_CP, /* only when nd > 1 */
    MTC_GROUP_DP,                  /* DATA_PARALLEL_GROUP */
    MTC_GROUP_CP,                  /* CONTEXT_PARALLEL_GROUP */
    MTC_GROUP_HIER_CP,             /* HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L<level> */
    MTC_GROUP_MP,                  /* MODEL_PARALLEL_GROUP */
    MTC_GROUP_TP,                  /* TENSOR_MODEL_PARALLEL_GROUP */
    MTC_GROUP_PP,                  /* PIPELINE_MODEL_PARALLEL_GROUP */
    MTC_GROUP_EMBD,                /* EMBEDDING_GROUP (first and last stage) */
    MTC_GROUP_POS_EMBD,            /* POSITION_EMBEDDING_GROUP (first stage) */
    MTC_GROUP_TP_DP_CP,            /* TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP */
    MTC_GROUP_TP_DP,               /* TENSOR_AND_DATA_PARALLEL_GROUP */
    MTC_GROUP_TP_CP,               /* TENSOR_AND_CONTEXT_PARALLEL_GROUP */
    MTC_GROUP_EP,                  /* EXPERT_MODEL_PARALLEL_GROUP */
    MTC_GROUP_EXPT_TP,             /* EXPERT_TENSOR_PARALLEL_GROUP */
    MTC_GROUP_TP_EP,               /* EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP */
    MTC_GROUP_TP_EP_PP,            /* EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP */
    MTC_GROUP_EXPT_DP,             /* EXPERT_DATA_PARALLEL_GROUP */
    MTC_GROUP_HIER_EXPT_DP,        /* HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0/L1, nd > 1 */
    MTC_GROUP_INTRA_DIST_OPT,      /* INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP */
    /* built by mtc_grid_init only (no rank list in mtc_grid_groups), one
     * communicator per model chunk (level = chunk), nd > 1: */
    MTC_GROUP_INTER_DIST_OPT,      /* the dense shard's inter-instance all-reduce: position j of
                                      every INTRA_PARTIAL slice of one dp-cp list */
    MTC_GROUP_EXPT_INTER_DIST_OPT, /* the same for the expert shard (ep > 1): position j of every
                                      HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0 slice */
    /* built by mtc_grid_init only, pp > 1: the pipeline executor's two
     * channels, each the ranks of PIPELINE_MODEL_PARALLEL_GROUP in its order */
    MTC_GROUP_PP_ACTIVATIONS, /* activations forward */
    MTC_GROUP_PP_GRADIENTS,   /* gradients backward */
    MTC_GROUP_KIND_COUNT
} mtc_grid_kind_t;

/* The groups of one kind (and level): count lists of `size` ranks each. */
typedef struct {
    char name[64]; /* Megatron's group_desc */
    mtc_grid_kind_t kind;
    int level; /* hierarchical level, else 0 */
    int count, size;
    int *ranks;    /* (count, size) */
    int partition; /* 1 when the lists partition the world */
} mtc_grid_group_set;

typedef struct {
    int nsets; /* in Megatron's creation order */
    mtc_grid_group_set *sets;
} mtc_grid_groups;

/* Every group Megatron builds for a validated spec. */
mtc_result_t mtc_grid_groups_build(mtc_grid_groups *out, const mtc_grid_spec *s);
void mtc_grid_groups_free(mtc_grid_groups *g);
/* NULL when that kind/level was not built. */
const mtc_grid_group_set *mtc_grid_groups_find(const mtc_grid_groups *g, mtc_grid_kind_t kind,
                                               int level);
/* Index of the list holding `rank` (-1 if none); *pos = its position there. */
int mtc_grid_group_of(const mtc_grid_group_set *set, int rank, int *pos);

/* With nd > 1 distributed-optimizer instances Megatron reduce-scatters dense
 * gradients over INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP and all-reduces
 * the shard over HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1 (the
 * inter-instance group). That is only right when every L1 group is "position
 * j of each intra-partial slice of one dp-cp list" and every intra-partial
 * group lies inside one INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP. True for
 * the orders Megatron training uses; false for some orders core accepts.
 * Returns 1 when consistent (always when nd == 1), 0 otherwise. */
int mtc_grid_groups_dist_opt_consistent(const mtc_grid_groups *g, int world_size);

/* ---- the per-rank grid object ------------------------------------------ */

/* Which groups a parameter's gradient is summed over (a bit set the model's
 * registry keeps per parameter, model/registry.h); mtc_grid_reduce_comm
 * maps a bit to this rank's group. Serial runs reduce over nothing. */
enum {
    MTC_REDUCE_DP_CP = 1u << 0,     /* every dense parameter */
    MTC_REDUCE_TP = 1u << 1,        /* layer-norm weights under sequence parallelism */
    MTC_REDUCE_EMBEDDING = 1u << 2, /* tied input/output embedding across PP stages */
};

typedef struct mtc_grid *mtc_grid_t;

/* Collective over world: validate cfg (world_size 0 = the communicator's
 * size), then split one communicator per group this rank belongs to. Every
 * rank of world must call it with the same cfg. */
mtc_result_t mtc_grid_init(mtc_grid_t *out, mtc_comm_t world, const mtc_grid_config *cfg);
void mtc_grid_free(mtc_grid_t g);
const mtc_grid_spec *mtc_grid_spec_get(mtc_grid_t g);
const mtc_grid_coord *mtc_grid_coords(mtc_grid_t g);
/* The rank's communicator of that kind/level; NULL if not a member (e.g.
 * EMBEDDING_GROUP on a middle stage) or not built (e.g. nd == 1). */
mtc_comm_t mtc_grid_comm(mtc_grid_t g, mtc_grid_kind_t kind, int level);
/* The group that sums the gradients tagged with one MTC_REDUCE_* bit:
 * DATA_PARALLEL_GROUP_WITH_CP, TENSOR_MODEL_PARALLEL_GROUP, EMBEDDING_GROUP;
 * NULL when the rank's group has one member (nothing to sum) or for
 * another value. */
mtc_comm_t mtc_grid_reduce_comm(mtc_grid_t g, unsigned bit);
/* The communicator of that kind/level when it has more than one member, else NULL. */
mtc_comm_t mtc_grid_comm_nontrivial(mtc_grid_t g, mtc_grid_kind_t kind, int level);
/* Model chunks the grid holds per-chunk groups for (vpp, 1 when none). */
int mtc_grid_chunks(mtc_grid_t g);
/* The rank's list of that group (world ranks) and its length; NULL if none. */
const int *mtc_grid_members(mtc_grid_t g, mtc_grid_kind_t kind, int level, int *n);

/* ---- pictures ---------------------------------------------------------- */

/* A self-contained SVG of the rank grid: cells grouped by node
 * (gpus_per_node), coloured by tensor-parallel group, with pipeline stage,
 * data-parallel replica and coordinates, and groups that cross nodes marked. */
mtc_result_t mtc_grid_render_svg(FILE *f, const mtc_grid_spec *s, const mtc_grid_groups *g,
                                 int gpus_per_node);

/* What `mtc ranks --highlight` emphasises: every group of one kind (each
 * group's cells outlined in a colour of its own, labelled with the group's
 * index) and/or a list of ranks (outlined; the other cells faded). */
typedef struct {
    const mtc_grid_group_set *set; /* NULL: no group kind */
    const int *ranks;              /* NULL: no rank list */
    int nranks;
} mtc_grid_highlight;

/* As mtc_grid_render_svg, with h (NULL: nothing) emphasised. */
mtc_result_t mtc_grid_render_svg_highlight(FILE *f, const mtc_grid_spec *s,
                                           const mtc_grid_groups *g, int gpus_per_node,
                                           const mtc_grid_highlight *h);

/* grid/nodes.c: the banner's node map of `world` (which ranks share a
 * node), the process groups that cross nodes, and a warning when TP's do
 * (mpi only; nothing for thread-ranks). Does not communicate. */
void mtc_grid_print_nodes(mtc_grid_t grid, mtc_comm_t world, FILE *out);

#endif
