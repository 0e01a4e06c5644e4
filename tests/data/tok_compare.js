// tok_compare.js - reference ids for tokenizers.sh from two independent
// GPT-2 tokenizers installed by npm: js-tiktoken's "gpt2" encoding and
// gpt-3-encoder. Reads one JSON string per line (CASES), writes one line of
// space-separated ids per case to OUT_TIKTOKEN and OUT_GPT3, and prints how
// long each took. "<|endoftext|>" in the text is the special token 50256
// (as the Hugging Face GPT-2 tokenizer Megatron builds treats it): js-tiktoken
// is asked to allow it; gpt-3-encoder does not know it, so the text is split
// there and 50256 put between the pieces. gpt-3-encoder is slow (minutes
// for all of fortunes), so it gets the cases in order until GPT3_BUDGET bytes
// and writes "skip" for the rest.
//   node tok_compare.js NODE_MODULES CASES OUT_TIKTOKEN OUT_GPT3 [GPT3_BUDGET]
const fs = require("fs");
const path = require("path");
const [modules, casesPath, outTT, outG3, budgetArg] = process.argv.slice(2);
const budget = Number(budgetArg || 200000);
const { getEncoding } = require(path.join(modules, "js-tiktoken"));
const gpt3 = require(path.join(modules, "gpt-3-encoder"));
const cases = fs.readFileSync(casesPath, "utf8").split("\n").filter((l, i, a) => i < a.length - 1 || l !== "").map((l) => JSON.parse(l));
const enc = getEncoding("gpt2");
let t0 = process.hrtime.bigint();
fs.writeFileSync(outTT, cases.map((t) => enc.encode(t, "all").join(" ") + "\n").join(""));
const ttMs = Number(process.hrtime.bigint() - t0) / 1e6;
t0 = process.hrtime.bigint();
const g3 = (t) => t.split("<|endoftext|>").map((p) => gpt3.encode(p)).reduce((a, b) => a.concat([50256], b));
let used = 0;
fs.writeFileSync(outG3, cases.map((t) => {
  used += Buffer.byteLength(t);
  return (used <= budget || t.length < 1000 ? g3(t).join(" ") : "skip") + "\n";
}).join(""));
const g3Ms = Number(process.hrtime.bigint() - t0) / 1e6;
const bytes = cases.reduce((n, t) => n + Buffer.byteLength(t), 0);
console.log(`js-tiktoken ${ttMs.toFixed(0)} ms for ${cases.length} cases, ${bytes} bytes; gpt-3-encoder ${g3Ms.toFixed(0)} ms for the first ${Math.min(used, budget)} bytes`);
