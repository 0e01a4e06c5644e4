// tiktoken_ref.js - reference ids for tok_tiktoken.sh from npm js-tiktoken,
// on a vocabulary in Megatron's TikTokenizer format made from js-tiktoken's
// own cl100k_base ranks: entries 0..255 the single bytes in byte order (as
// Megatron requires), then cl100k's multi-byte tokens in rank order (the
// merge order is kept, so BPE is unchanged up to the renumbering), cut to
// N_TOKENS entries. js-tiktoken is given the same vocabulary shifted by
// NUM_SPECIAL, the special tokens <unk> <s> </s> <mask> <pad> <cls> <sep>
// <SPECIAL_7> ... at ids 0..NUM_SPECIAL-1, and Megatron's pattern (v1's
// possessive ?+ and ++ written greedy, which JavaScript needs and which
// match the same: what they would give back can never match what follows).
// Writes VOCAB.json and one line of ids per case (all special tokens allowed,
// as Megatron's text_to_ids) for each pattern.
//   node tiktoken_ref.js NODE_MODULES CASES N_TOKENS NUM_SPECIAL VOCAB.json OUT_V1 OUT_V2
const fs = require("fs");
const path = require("path");
const [modules, casesPath, nArg, specArg, vocabOut, outV1, outV2] = process.argv.slice(2);
const nTokens = Number(nArg), numSpecial = Number(specArg);
const { Tiktoken } = require(path.join(modules, "js-tiktoken", "dist", "lite.cjs"));
const base = require(path.join(modules, "js-tiktoken", "dist", "ranks", "cl100k_base.cjs"));
const b64 = (bytes) => Buffer.from(bytes).toString("base64");
const multi = [];
for (const line of base.bpe_ranks.split("\n").filter(Boolean)) {
  const [, offset, ...toks] = line.split(" ");
  toks.forEach((t, i) => {
    const bytes = Buffer.from(t, "base64");
    if (bytes.length > 1) multi.push([Number(offset) + i, t]);
  });
}
multi.sort((a, b) => a[0] - b[0]);
const vocab = [];
for (let i = 0; i < 256; i++) vocab.push(b64([i]));
for (const [, t] of multi) if (vocab.length < nTokens) vocab.push(t);
fs.writeFileSync(vocabOut, JSON.stringify(vocab.map((t, i) => ({
  rank: i, token_bytes: t, token_str: Buffer.from(t, "base64").toString("utf8") }))));
const specials = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"];
for (let i = specials.length; i < numSpecial; i++) specials.push(`<SPECIAL_${i}>`);
const special_tokens = Object.fromEntries(specials.map((s, i) => [s, i]));
const bpe_ranks = "x " + numSpecial + " " + vocab.join(" ");
const V1 = "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
const V2 = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const cases = fs.readFileSync(casesPath, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
for (const [pat, out] of [[V1, outV1], [V2, outV2]]) {
  const enc = new Tiktoken({ pat_str: pat, special_tokens, bpe_ranks });
  const t0 = process.hrtime.bigint();
  fs.writeFileSync(out, cases.map((t) => enc.encode(t, "all").join(" ") + "\n").join(""));
  console.log(`js-tiktoken ${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(0)} ms for ${cases.length} cases`);
}
