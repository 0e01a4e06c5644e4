/* data/mock.c - deterministic, learnable mock tokens (--mock-data).
 *
 * The process (stated in data.h, kept stable: tests and runs depend on it):
 * the stream is cut into segments of DATA_MOCK_PHRASE tokens; segment s plays
 * one of DATA_MOCK_PHRASES fixed random phrases, chosen by a counter-based
 * draw on s; each phrase is a fixed random sequence of token ids. A token is
 * therefore a pure function of (seed, vocab_size, position). Megatron's mock
 * dataset is uniform noise, which no model can learn; repeated phrases give a
 * loss that falls, so a training demo shows progress.
 * Relies on core/rng.h; does no I/O. */
#include "core/rng.h"
#include "data/stream.h"

static uint64_t stream_segment(void) { return mtc_rng_stream_of("data.mock.segment"); }
static uint64_t stream_pattern(void) { return mtc_rng_stream_of("data.mock.pattern"); }

int data_mock_token(uint64_t seed, int vocab_size, uint64_t pos) {
    uint64_t s = pos / DATA_MOCK_PHRASE;
    uint32_t q = mtc_rng_u32(seed, stream_segment(), s) % DATA_MOCK_PHRASES;
    uint64_t k = (uint64_t)q * DATA_MOCK_PHRASE + pos % DATA_MOCK_PHRASE;
    return (int)(mtc_rng_u32(seed, stream_pattern(), k) % (uint32_t)vocab_size);
}

void data_mock_read(uint64_t seed, int vocab_size, uint64_t first, size_t n, int *tokens) {
    uint64_t seg_stream = stream_segment(), pat_stream = stream_pattern();
    uint64_t cur = UINT64_MAX;
    uint32_t q = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t pos = first + i, s = pos / DATA_MOCK_PHRASE;
        if (s != cur) q = mtc_rng_u32(seed, seg_stream, s) % DATA_MOCK_PHRASES, cur = s;
        uint64_t k = (uint64_t)q * DATA_MOCK_PHRASE + pos % DATA_MOCK_PHRASE;
        tokens[i] = (int)(mtc_rng_u32(seed, pat_stream, k) % (uint32_t)vocab_size);
    }
}
