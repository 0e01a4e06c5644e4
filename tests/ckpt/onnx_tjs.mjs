// tests/ckpt/onnx_tjs.mjs - an `mtc export --format onnx` folder run by
// Hugging Face's own transformers.js (npm @huggingface/transformers, with
// onnxruntime-node's CPU binaries), from disk only:
//   node onnx_tjs.mjs NODE_MODULES generate DIR MAX_NEW PROMPT...
//     the text-generation pipeline, greedy (do_sample false), one line per
//     prompt: "PROMPT<tab>IDS<tab>TEXT" (IDS: the tokenizer's ids of the
//     prompt, space separated; TEXT: the continuation alone as a JSON
//     string); every console warning the
//     library prints is counted and fails the run (config, tokenizer and
//     session loading must be clean).
//   node onnx_tjs.mjs NODE_MODULES config DIR PROMPT...
//     AutoConfig and AutoTokenizer on a safetensors folder, from disk: one
//     line "model_type bos eos pad" (config.json's ids, generation_config.json's
//     must agree), then "PROMPT<tab>IDS" per prompt; any warning fails.
//   node onnx_tjs.mjs NODE_MODULES logits DIR IDS
//     onnxruntime-node on DIR/onnx/model*.onnx: the logits of the ids (space
//     separated) in one call with an empty cache, then the same ids fed in
//     two calls (prefix, then the rest with the first call's present.N as
//     past_key_values.N), printed as one line of V floats per position of
//     each run ("full" then "cached" rows).
import { readFileSync, readdirSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, mode, dir, ...rest] = process.argv.slice(2);
let warnings = 0;
for (const k of ["warn", "error"]) {
    const orig = console[k];
    console[k] = (...a) => {
        warnings++;
        process.stderr.write(`transformers.js ${k}: ${a.join(" ")}\n`);
    };
}
const tjs = await import(pathToFileURL(join(modules, "@huggingface", "transformers", "dist", "transformers.node.mjs")).href);
const abs = resolve(dir);

function local() {
    tjs.env.allowRemoteModels = false;
    tjs.env.allowLocalModels = true;
    tjs.env.localModelPath = dirname(abs) + "/";
    tjs.env.useBrowserCache = false;
}
function noWarnings() {
    if (warnings) {
        process.stderr.write(`${warnings} warnings\n`);
        process.exit(1);
    }
}

if (mode === "config") {
    local();
    const cfg = await tjs.AutoConfig.from_pretrained(basename(abs));
    const tok = await tjs.AutoTokenizer.from_pretrained(basename(abs));
    const gen = JSON.parse(readFileSync(join(abs, "generation_config.json"), "utf8"));
    for (const k of ["bos_token_id", "eos_token_id", "pad_token_id"])
        if (gen[k] !== cfg[k]) {
            process.stderr.write(`generation_config.json ${k} ${gen[k]} vs config.json ${cfg[k]}\n`);
            process.exit(1);
        }
    console.log(`${cfg.model_type} ${cfg.bos_token_id} ${cfg.eos_token_id} ${cfg.pad_token_id}`);
    for (const prompt of rest)
        process.stdout.write(`${prompt}\t${Array.from(tok.encode(prompt, { add_special_tokens: false })).join(" ")}\n`);
    noWarnings();
} else if (mode === "generate") {
    const [maxNew, ...prompts] = rest;
    local();
    const gen = await tjs.pipeline("text-generation", basename(abs));
    for (const prompt of prompts) {
        const ids = Array.from(gen.tokenizer.encode(prompt, { add_special_tokens: false }));
        const out = await gen(prompt, { max_new_tokens: +maxNew, do_sample: false, return_full_text: false, add_special_tokens: false });
        process.stdout.write(`${prompt}\t${ids.join(" ")}\t${JSON.stringify(out[0].generated_text)}\n`);
    }
    noWarnings();
} else if (mode === "logits") {
    const ort = await import(pathToFileURL(join(modules, "onnxruntime-node", "dist", "index.js")).href).catch(() =>
        import(pathToFileURL(join(modules, "onnxruntime-node", "lib", "index.js")).href));
    const ids = rest[0].split(" ").map(Number);
    const file = readdirSync(join(abs, "onnx")).find((f) => f.endsWith(".onnx"));
    const sess = await ort.InferenceSession.create(join(abs, "onnx", file));
    const cfg = JSON.parse(readFileSync(join(abs, "config.json"), "utf8"));
    const L = cfg.n_layer ?? cfg.num_hidden_layers;
    const kvh = cfg.num_key_value_heads ?? cfg.n_head;
    const hs = cfg.head_dim ?? cfg.n_embd / cfg.n_head;
    const i64 = (a) => new ort.Tensor("int64", BigInt64Array.from(a.map(BigInt)), [1, a.length]);
    async function run(chunk, start, past) {
        const feeds = {
            input_ids: i64(chunk),
            attention_mask: i64(new Array(start + chunk.length).fill(1)),
            position_ids: i64(chunk.map((_, k) => start + k)),
        };
        for (let l = 0; l < L; l++)
            for (const kv of ["key", "value"])
                feeds[`past_key_values.${l}.${kv}`] = past ? past[`present.${l}.${kv}`] : new ort.Tensor("float32", new Float32Array(0), [1, kvh, 0, hs]);
        return sess.run(feeds);
    }
    const print = (tag, t) => {
        const [, S, V] = t.dims;
        for (let s = 0; s < S; s++) console.log(tag + " " + Array.from(t.data.slice(s * V, (s + 1) * V)).join(" "));
    };
    print("full", (await run(ids, 0, null)).logits);
    const cut = Math.floor(ids.length / 2);
    const first = await run(ids.slice(0, cut), 0, null);
    print("cached", first.logits);
    print("cached", (await run(ids.slice(cut), cut, first)).logits);
}
