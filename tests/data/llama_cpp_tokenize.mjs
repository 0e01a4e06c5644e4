// llama_cpp_tokenize.mjs - llama.cpp's own tokenizer (the prebuilt CPU binary
// of npm node-llama-cpp) on the vocabulary of a GGUF file mtc exported:
//   node llama_cpp_tokenize.mjs NODE_MODULES MODEL.gguf CASES OUT
// writes one line of space-separated ids per JSON-string line of CASES
// (special token texts not parsed: the text is text), and checks that
// detokenizing gives the text back (prints how many do not).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, modelPath, casesPath, out] = process.argv.slice(2);
const { getLlama } = await import(pathToFileURL(join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath, vocabOnly: true });
const cases = readFileSync(casesPath, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
let bad = 0;
const lines = cases.map((text) => {
    const ids = [...model.tokenize(text, false)].map(Number);
    if (model.detokenize(ids) !== text) bad++;
    return ids.join(" ") + "\n";
});
writeFileSync(out, lines.join(""));
console.log(`${cases.length} cases, ${bad} detokenize differences`);
await model.dispose();
await llama.dispose();
