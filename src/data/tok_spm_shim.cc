// data/tok_spm_shim.cc - the only C++ in mtc: tok_spm.h's C functions over
// Debian's libsentencepiece SentencePieceProcessor. Every call catches
// every exception (none may cross into C) and reports failures as -1 with
// the library's message. Knows nothing of Megatron (tok_spm.c does).
#include "data/tok_spm.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct tok_spm_proc {
    sentencepiece::SentencePieceProcessor sp;
};

static void set_err(char *err, size_t cap, const std::string &msg) {
    if (err && cap) std::snprintf(err, cap, "%s", msg.c_str());
}

extern "C" tok_spm_proc *tok_spm_proc_load(const char *path, char *err, size_t cap) {
    try {
        tok_spm_proc *p = new tok_spm_proc;
        auto st = p->sp.Load(path);
        if (!st.ok()) {
            set_err(err, cap, st.ToString());
            delete p;
            return nullptr;
        }
        return p;
    } catch (const std::exception &e) {
        set_err(err, cap, e.what());
    } catch (...) {
        set_err(err, cap, "unknown error in libsentencepiece");
    }
    return nullptr;
}

extern "C" void tok_spm_proc_free(tok_spm_proc *p) { delete p; }

extern "C" int tok_spm_proc_size(const tok_spm_proc *p) { return p->sp.GetPieceSize(); }
extern "C" int tok_spm_proc_bos(const tok_spm_proc *p) { return p->sp.bos_id(); }
extern "C" int tok_spm_proc_eos(const tok_spm_proc *p) { return p->sp.eos_id(); }
extern "C" int tok_spm_proc_unk(const tok_spm_proc *p) { return p->sp.unk_id(); }
extern "C" int tok_spm_proc_pad(const tok_spm_proc *p) { return p->sp.pad_id(); }

extern "C" int tok_spm_proc_piece_id(const tok_spm_proc *p, const char *piece, size_t n) {
    try {
        return p->sp.PieceToId(absl::string_view(piece, n));
    } catch (...) {
        return p->sp.unk_id();
    }
}

extern "C" const char *tok_spm_proc_piece(const tok_spm_proc *p, int id, size_t *n) {
    const std::string &s = p->sp.IdToPiece(id);
    *n = s.size();
    return s.c_str();
}

extern "C" float tok_spm_proc_score(const tok_spm_proc *p, int id) { return p->sp.GetScore(id); }

extern "C" int tok_spm_proc_kind(const tok_spm_proc *p, int id) {
    if (p->sp.IsUnknown(id)) return 1;
    if (p->sp.IsControl(id)) return 2;
    if (p->sp.IsByte(id)) return 4;
    if (p->sp.IsUnused(id)) return 5;
    /* user defined pieces are neither of the above; the library has no
     * query for them, tok_spm.c reads them from the model proto */
    return 0;
}

extern "C" int tok_spm_proc_encode(const tok_spm_proc *p, const char *text, size_t n, int **ids,
                                   size_t *n_ids, char *err, size_t cap) {
    *ids = nullptr, *n_ids = 0;
    try {
        std::vector<int> v;
        auto st = p->sp.Encode(absl::string_view(text, n), &v);
        if (!st.ok()) {
            set_err(err, cap, st.ToString());
            return -1;
        }
        if (v.empty()) return 0;
        int *out = static_cast<int *>(std::malloc(v.size() * sizeof(int)));
        if (!out) {
            set_err(err, cap, "out of memory");
            return -1;
        }
        std::memcpy(out, v.data(), v.size() * sizeof(int));
        *ids = out, *n_ids = v.size();
        return 0;
    } catch (const std::exception &e) {
        set_err(err, cap, e.what());
    } catch (...) {
        set_err(err, cap, "unknown error in libsentencepiece");
    }
    return -1;
}

extern "C" int tok_spm_proc_decode(const tok_spm_proc *p, const int *ids, size_t n, char **out,
                                   size_t *len, char *err, size_t cap) {
    *out = nullptr, *len = 0;
    try {
        std::vector<int> v(ids, ids + n);
        std::string s;
        auto st = p->sp.Decode(v, &s);
        if (!st.ok()) {
            set_err(err, cap, st.ToString());
            return -1;
        }
        char *o = static_cast<char *>(std::malloc(s.size() + 1));
        if (!o) {
            set_err(err, cap, "out of memory");
            return -1;
        }
        std::memcpy(o, s.data(), s.size());
        o[s.size()] = 0;
        *out = o, *len = s.size();
        return 0;
    } catch (const std::exception &e) {
        set_err(err, cap, e.what());
    } catch (...) {
        set_err(err, cap, "unknown error in libsentencepiece");
    }
    return -1;
}
