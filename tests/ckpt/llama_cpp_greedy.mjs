// tests/ckpt/llama_cpp_greedy.mjs - greedy continuations in the real
// llama.cpp (the prebuilt CPU binary of the npm package node-llama-cpp):
//   node llama_cpp_greedy.mjs NODE_MODULES N A.gguf[,B.gguf...] TEXT...
// For each model and each TEXT: tokenizes TEXT with llama.cpp's tokenizer
// (the vocabulary in the GGUF metadata), evaluates it, then N times takes
// the largest logit and feeds it back; prints "MODEL<TAB>TEXT<TAB>prompt
// ids<TAB>JSON of the detokenized prompt + continuation" per line. One
// process for everything: starting llama.cpp costs seconds.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, nArg, models, ...texts] = process.argv.slice(2);
const { getLlama } = await import(pathToFileURL(join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const argmax = (logits) => {
    let best = -1, bestv = -Infinity;
    for (const [t, v] of logits) if (v > bestv || (v === bestv && t < best)) (best = t), (bestv = v);
    return best;
};
for (const modelPath of models.split(",")) {
    const model = await llama.loadModel({ modelPath });
    for (const text of texts) {
        const context = await model.createContext({ contextSize: 64, sequences: 1, threads: 1 });
        const seq = context.getSequence();
        const prompt = [...model.tokenize(text)].map(Number);
        let input = prompt;
        const out = [];
        for (let i = 0; i < Number(nArg); i++) {
            const items = input.map((t, k) => (k === input.length - 1 ? [t, { generateNext: { logits: true } }] : t));
            const res = await seq.controlledEvaluate(items);
            const next = argmax(res[res.length - 1].next.logits);
            out.push(next);
            input = [next];
        }
        console.log([modelPath, text, prompt.join(" "), JSON.stringify(model.detokenize([...prompt, ...out]))].join("\t"));
        await context.dispose();
    }
    await model.dispose();
}
await llama.dispose();
