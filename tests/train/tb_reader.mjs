// tests/train/tb_reader.mjs - an independent reader of TensorBoard event
// files, written from the specifications, not from mtc's writer:
//  - TFRecord (tensorflow/core/lib/io/record_writer.cc): uint64 LE length,
//    uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked CRC-32C
//    of the data; mask(c) = ((c >>> 15) | (c << 17)) + 0xa282ead8;
//  - CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), checked against
//    the catalogue's check value crc("123456789") = 0xe3069283;
//  - protobuf wire format (varint keys: field << 3 | type; 0 varint, 1 64-bit,
//    2 length-delimited, 5 32-bit, little-endian), decoding
//    tensorflow.Event {1 wall_time double, 2 step int64, 3 file_version
//    string, 5 summary} and Summary {1 value: {1 tag string, 2 simple_value
//    float}} (tensorboard/compat/proto/event.proto, summary.proto).
// Usage: node tb_reader.mjs DIR  -> one JSON line per event on stdout; a bad
// CRC, a torn record or a malformed proto exits 1 naming the file and offset.
import fs from "node:fs";
import path from "node:path";

const TABLE = new Uint32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  TABLE[n] = c >>> 0;
}
function crc32c(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
const masked = (c) => ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) >>> 0;
if (crc32c(Buffer.from("123456789")) !== 0xe3069283) throw new Error("crc32c self-check failed");

function fail(msg) {
  console.error("tb_reader: " + msg);
  process.exit(1);
}

// Decodes one message into {field: [values]}; values: BigInt (varint),
// Buffer (8/4 bytes, length-delimited).
function fields(buf, where) {
  const out = {};
  let i = 0;
  const varint = () => {
    let v = 0n, shift = 0n;
    for (;;) {
      if (i >= buf.length) fail(where + ": truncated varint");
      const b = buf[i++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      shift += 7n;
      if (shift > 63n) fail(where + ": varint too long");
    }
  };
  while (i < buf.length) {
    const key = varint();
    const field = Number(key >> 3n), type = Number(key & 7n);
    let v;
    if (type === 0) v = varint();
    else if (type === 1) { v = buf.subarray(i, i + 8); i += 8; }
    else if (type === 5) { v = buf.subarray(i, i + 4); i += 4; }
    else if (type === 2) { const n = Number(varint()); v = buf.subarray(i, i + n); i += n; }
    else fail(where + ": wire type " + type);
    if (i > buf.length) fail(where + ": field " + field + " runs past the message");
    (out[field] ||= []).push(v);
  }
  return out;
}

const dir = process.argv[2];
const files = fs.readdirSync(dir).filter((f) => f.startsWith("events.out.tfevents.")).sort();
if (!files.length) fail(dir + ": no events.out.tfevents.* file");
for (const f of files) {
  const b = fs.readFileSync(path.join(dir, f));
  let at = 0, n = 0;
  while (at < b.length) {
    if (at + 12 > b.length) fail(`${f}@${at}: torn record header`);
    const len = Number(b.readBigUInt64LE(at));
    if (b.readUInt32LE(at + 8) !== masked(crc32c(b.subarray(at, at + 8))))
      fail(`${f}@${at}: length CRC mismatch`);
    const data = b.subarray(at + 12, at + 12 + len);
    if (at + 16 + len > b.length) fail(`${f}@${at}: torn record`);
    if (b.readUInt32LE(at + 12 + len) !== masked(crc32c(data))) fail(`${f}@${at}: data CRC mismatch`);
    const e = fields(data, `${f}@${at}`);
    const ev = { file: f, record: n };
    if (e[1]) ev.wall_time = e[1][0].readDoubleLE(0);
    ev.step = e[2] ? Number(BigInt.asIntN(64, e[2][0])) : 0;
    if (e[3]) ev.file_version = e[3][0].toString("utf8");
    for (const s of e[5] || []) {
      for (const v of fields(s, `${f}@${at} summary`)[1] || []) {
        const val = fields(v, `${f}@${at} value`);
        console.log(JSON.stringify({ ...ev, tag: val[1][0].toString("utf8"),
                                     value: val[2] ? val[2][0].readFloatLE(0) : null }));
      }
    }
    if (!e[5]) console.log(JSON.stringify(ev));
    at += 16 + len, n++;
  }
}
