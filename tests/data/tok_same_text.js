// tok_same_text.js - exits 1 unless two files of JSON strings (one per line)
// hold the same strings; names the first case that differs.
//   node tok_same_text.js A B
const fs = require("fs");
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter((l, i, a) => i < a.length - 1 || l !== "").map((l) => JSON.parse(l));
const [a, b] = process.argv.slice(2).map(read);
if (a.length !== b.length) { console.error(`${a.length} vs ${b.length} cases`); process.exit(1); }
for (let i = 0; i < a.length; i++)
  if (a[i] !== b[i]) { console.error(`case ${i + 1} differs: ${JSON.stringify(a[i]).slice(0, 80)} vs ${JSON.stringify(b[i]).slice(0, 80)}`); process.exit(1); }
