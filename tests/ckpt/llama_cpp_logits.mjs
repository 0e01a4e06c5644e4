// tests/ckpt/llama_cpp_logits.mjs - the real llama.cpp's logits (npm
// node-llama-cpp's prebuilt CPU binary) after a prompt:
//   node llama_cpp_logits.mjs NODE_MODULES MODEL.gguf TEXT...
// For each TEXT prints "TEXT<TAB>prompt ids<TAB>logits" (the vocabulary's
// logits at the prompt's last position, space-separated, id order), to be
// compared with mtc's own (tests/ckpt/logits_ref.c) within a tolerance:
// greedy text alone does not see a softmax scale or a routing weight off by
// a few percent.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, modelPath, ...texts] = process.argv.slice(2);
const { getLlama } = await import(pathToFileURL(join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
for (const text of texts) {
    const context = await model.createContext({ contextSize: 64, sequences: 1, threads: 1 });
    const seq = context.getSequence();
    const prompt = [...model.tokenize(text)].map(Number);
    const items = prompt.map((t, k) => (k === prompt.length - 1 ? [t, { generateNext: { logits: true } }] : t));
    const res = await seq.controlledEvaluate(items);
    const logits = new Map(res[res.length - 1].next.logits);
    const row = [];
    for (let t = 0; t < logits.size; t++) row.push(logits.get(t));
    console.log([text, prompt.join(" "), row.join(" ")].join("\t"));
    await context.dispose();
}
await model.dispose();
await llama.dispose();
