#!/usr/bin/env node
// Builds a JavaScript transform into a weir:transform@0.2.0 component with componentize-js
// (SpiderMonkey/StarlingMonkey, pre-initialised with Wizer).
//
//   node guest-sdk/js/bin/weir-build-js.js <entry.js> -o <out.wasm> [--aot]
//
// The entry module exports init/process/snapshot/restore/onTimer, normally through
// `exportTransform`.
// It may import other modules by relative path (the SDK included); bare package names and
// absolute paths are not resolved. WASI features: stdio (console.* and uncaught errors to the host log), random
// (Math.random, crypto) and clocks (Date, performance) stay on; http and fetch-event are
// disabled, since the Weir host grants no wasi:http.
import { componentize } from '@bytecodealliance/componentize-js';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

function usage(code) {
  console.error('usage: weir-build-js.js <entry.js> -o <out.wasm> [--aot]');
  process.exit(code);
}

const args = process.argv.slice(2);
let entry;
let out;
let aot = false;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '-o' || a === '--out') out = args[++i];
  else if (a === '--aot') aot = true;
  else if (a === '-h' || a === '--help') usage(0);
  else if (a.startsWith('-')) usage(2);
  else if (entry === undefined) entry = a;
  else usage(2);
}
if (!entry || !out) usage(2);

// componentize-js can only read modules below its working directory: run it from the deepest
// folder that holds both the entry module and the SDK it imports: the project's own copy of the
// SDK (weir-sdk/js, as `weir transform init` writes it) when there is one, else this SDK.
const sourcePath = resolve(entry);
const vendored = resolve(dirname(sourcePath), 'weir-sdk/js');
const sdkDir = existsSync(vendored) ? vendored : resolve(here, '..');
// The WIT world of that SDK's contract: 0.2, or 0.1 for a project's copy of an SDK from before
// 0.2 (its imports name the contract version).
const contract01 = readFileSync(resolve(sdkDir, 'src/host.js'), 'utf8').includes('@0.1.0');
const witPath = resolve(sdkDir, contract01 ? '../wit-0.1' : '../wit');
let root = dirname(sourcePath);
while (relative(root, sdkDir).startsWith('..')) root = dirname(root);
if (root === dirname(root)) {
  console.error(`weir-build-js: ${sourcePath} and the SDK (${sdkDir}) share no folder but the root, and componentize-js reads modules only below its working directory: keep them under one folder`);
  process.exit(1);
}
// Without WEVAL_BIN, an --aot build downloads weval from GitHub's releases (componentize-js).
const wevalBin = process.env.WEVAL_BIN ? resolve(process.env.WEVAL_BIN) : undefined;
process.chdir(root);

// --aot: weval specialises the JS interpreter to the transform's code ahead of time. It cannot
// map folders as wizer does, so it reads modules only below the entry module's folder.
if (aot && relative(dirname(sourcePath), sdkDir).startsWith('..')) {
  console.error(`weir-build-js: --aot reads modules only below the entry module's folder (${dirname(sourcePath)}), and the SDK (${sdkDir}) is not there: put the entry module in the project's top folder, beside weir-sdk/ (as \`weir transform init\` writes it), or build without --aot`);
  process.exit(1);
}
if (aot && wevalBin && !existsSync(wevalBin)) {
  console.error(`weir-build-js: WEVAL_BIN=${wevalBin}: no such file; point it at a weval executable (cargo install weval --version 0.5.0)`);
  process.exit(1);
}

const started = Date.now();
let component;
try {
  ({ component } = await componentize({
    sourcePath,
    witPath,
    worldName: 'transform',
    disableFeatures: ['http', 'fetch-event'],
    enableAot: aot,
    wevalBin,
  }));
} catch (e) {
  if (aot && !wevalBin && e instanceof TypeError && e.message === 'fetch failed') {
    console.error(`weir-build-js: --aot needs weval, and componentize-js could not download it from github.com (${e.cause?.message ?? e.message}): set WEVAL_BIN to a weval executable (cargo install weval --version 0.5.0), or build without --aot`);
    process.exit(1);
  }
  throw e;
}
const dest = resolve(out);
await mkdir(dirname(dest), { recursive: true });
await writeFile(`${dest}.tmp`, component);
await rename(`${dest}.tmp`, dest);
console.error(`weir-build-js: ${dest} (${component.byteLength} bytes, ${((Date.now() - started) / 1000).toFixed(1)} s)`);
