// tok_cases.js - the cases tokenizers.sh compares: the edge cases file, then
// each fortunes file that is valid UTF-8 (one JSON string per line). Files
// are read in name order; .dat indexes and symlinks (duplicates) skipped.
//   node tok_cases.js EDGE_CASES FORTUNES_DIR OUT
const fs = require("fs");
const path = require("path");
const [edge, dir, out] = process.argv.slice(2);
const lines = fs.readFileSync(edge, "utf8").split("\n").filter((l) => l !== "");
let files = 0;
if (fs.existsSync(dir)) {
  for (const name of fs.readdirSync(dir).sort()) {
    const p = path.join(dir, name);
    if (name.endsWith(".dat") || fs.lstatSync(p).isSymbolicLink() || !fs.statSync(p).isFile()) continue;
    const buf = fs.readFileSync(p);
    const text = buf.toString("utf8");
    if (!Buffer.from(text, "utf8").equals(buf)) continue; // not valid UTF-8
    lines.push(JSON.stringify(text));
    files++;
  }
}
fs.writeFileSync(out, lines.join("\n") + "\n");
console.log(`${lines.length} cases (${files} fortunes files)`);
