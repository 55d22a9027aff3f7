// bench.js: ONNX Runtime's side of benchmarks/ort (main.go runs it).
// usage: node bench.js MODEL.onnx BATCH SECONDS|serve THREADS [INPUTS]
// Loads MODEL with onnxruntime-node's CPU execution provider (THREADS intra-op threads, one
// inter-op thread, sequential execution, all graph optimisations), feeds seeded random
// inputs of batch BATCH, warms up twice, then runs for SECONDS and prints one JSON line:
// {"images_per_sec", "p50_ms", "p99_ms", "min_ms", "images_per_cpu_second", "runs", "batch",
// "threads"} (CPU time: the whole process, all threads). INPUTS describes the inputs, which
// onnxruntime-node 1.20 does not expose: NAME:TYPE:DIMS[,NAME:TYPE:DIMS...] with TYPE
// float32 or int64 and DIMS the dims after the batch joined by commas, e.g.
// "ids:int64:128,mask:int64:128" (entries split at each NAME:TYPE: ...). float32 inputs get
// uniform random values, int64 ones 1 (a valid token id, a mask of real tokens), as
// `idunno bench kernel` feeds them. Without INPUTS every input is a 3x224x224 image
// (299x299 for inception_v3).
'use strict';
const ort = require('onnxruntime-node');

// timeRuns runs batches for SECONDS and at least minRuns of them: each one's latency (ms),
// the seconds they took in all and the process's CPU seconds meanwhile.
async function timeRuns(sess, feeds, seconds, minRuns) {
  const lat = [];
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  const limit = BigInt(Math.round(seconds * 1e9));
  while (process.hrtime.bigint() - start < limit || lat.length < minRuns) {
    const t0 = process.hrtime.bigint();
    await sess.run(feeds);
    lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const cpu = process.cpuUsage(cpu0);
  return { lat, total: Number(process.hrtime.bigint() - start) / 1e9, cpuSeconds: (cpu.user + cpu.system) / 1e6 };
}

// serveSlices is the serve mode (SECONDS = serve), the protocol of `idunno bench kernel
// --serve`: a ready line, then for each line of stdin holding seconds S, batches for S
// seconds (at least one) and one JSON line {"runs", "batch", "seconds", "cpu_seconds",
// "lat_ms"}, until stdin ends.
async function serveSlices(sess, feeds, batch) {
  console.log(JSON.stringify({ ready: true }));
  const rl = require('readline').createInterface({ input: process.stdin, terminal: false });
  for await (const raw of rl) {
    const line = raw.trim();
    if (line === '') continue;
    const secs = parseFloat(line);
    if (!(secs > 0 && secs <= 3600)) throw new Error(`serve: want seconds in (0, 3600], got ${JSON.stringify(line)}`);
    const { lat, total, cpuSeconds } = await timeRuns(sess, feeds, secs, 1);
    console.log(JSON.stringify({ runs: lat.length, batch, seconds: total, cpu_seconds: cpuSeconds, lat_ms: lat }));
  }
}

async function main() {
  const [model, batchS, secondsS, threadsS, inputsS] = process.argv.slice(2);
  const serve = secondsS === 'serve';
  const batch = parseInt(batchS, 10), seconds = serve ? 1 : parseFloat(secondsS), threads = parseInt(threadsS, 10);
  if (!model || !(batch >= 1) || !(seconds > 0) || !(threads >= 1)) {
    console.error('usage: node bench.js MODEL.onnx BATCH SECONDS|serve THREADS [INPUTS]');
    process.exit(2);
  }
  const sess = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  // seeded inputs (xorshift), the model's input shape with the batch dim replaced
  let s = 0x9e3779b9;
  const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
  const specs = {};
  if (inputsS) {
    // "ids:int64:128,mask:int64:128": an entry starts at each NAME:TYPE:
    const re = /([^,:]+):(float32|int64):([0-9,]*?)(?=,[^,:]+:(?:float32|int64):|$)/g;
    let m;
    while ((m = re.exec(inputsS)) !== null) {
      specs[m[1]] = { type: m[2], dims: m[3] === '' ? [] : m[3].split(',').map((d) => parseInt(d, 10)) };
    }
  }
  const feeds = {};
  for (const name of sess.inputNames) {
    // onnxruntime-node 1.20 exposes no input shapes: INPUTS gives them, else NCHW images
    const size = /inception_v3/.test(model) ? 299 : 224;
    const spec = inputsS ? specs[name] : { type: 'float32', dims: [3, size, size] };
    if (!spec) throw new Error(`input ${name} is not described in ${inputsS}`);
    const dims = [batch, ...spec.dims];
    const n = dims.reduce((a, b) => a * b, 1);
    if (spec.type === 'int64') {
      feeds[name] = new ort.Tensor('int64', new BigInt64Array(n).fill(1n), dims);
    } else {
      const data = new Float32Array(n);
      for (let i = 0; i < data.length; i++) data[i] = rnd();
      feeds[name] = new ort.Tensor('float32', data, dims);
    }
  }
  for (let i = 0; i < 2; i++) await sess.run(feeds);
  if (serve) return serveSlices(sess, feeds, batch);
  const { lat, total, cpuSeconds } = await timeRuns(sess, feeds, seconds, 3);
  lat.sort((a, b) => a - b);
  const pct = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  console.log(JSON.stringify({
    images_per_sec: (lat.length * batch) / total, p50_ms: pct(0.5), p99_ms: pct(0.99), min_ms: lat[0],
    images_per_cpu_second: cpuSeconds > 0 ? (lat.length * batch) / cpuSeconds : 0,
    runs: lat.length, batch, threads,
  }));
}

main().catch((e) => { console.error(`bench.js: ${e.message || e}`); process.exit(1); });
