// tests/ckpt/hf_tokenizer.mjs - the tokenizer files of an `mtc export
// --format safetensors` folder read by Hugging Face's own JavaScript
// tokenizers (npm @huggingface/tokenizers, "Tokenizers.js"):
//   node hf_tokenizer.mjs NODE_MODULES DIR CASES OUT
// loads DIR/tokenizer.json with DIR/tokenizer_config.json, encodes each
// JSON-string line of CASES (no special tokens added around it) and writes
// one line of space-separated ids per case to OUT, then checks that
// decoding gives the text back (prints the first case that does not).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, dir, casesPath, out] = process.argv.slice(2);
const pkg = join(modules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(pkg).href);
const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(json, config);
const cases = readFileSync(casesPath, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
const lines = [];
let bad = 0;
for (const text of cases) {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    lines.push(ids.join(" "));
    const back = ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    if (back !== text && bad++ === 0) console.log(`decode differs: ${JSON.stringify(text).slice(0, 80)} -> ${JSON.stringify(back).slice(0, 80)}`);
}
writeFileSync(out, lines.map((l) => l + "\n").join(""));
console.log(`${cases.length} cases, ${bad} decode differences`);
process.exit(bad ? 1 : 0);
