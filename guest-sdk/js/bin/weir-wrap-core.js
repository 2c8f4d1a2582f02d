#!/usr/bin/env node
// Wraps a WASI preview1 *reactor* core module that implements a weir:transform world by hand
// (the Go SDK's output: GOOS=wasip1 GOARCH=wasm -buildmode=c-shared) into a component:
//
//   1. embeds the world's WIT (by default guest-sdk/wit/transform.wit, world `transform`; `--wit`
//      names another file, e.g. guest-sdk/wit-0.1/transform.wit for a 0.1 module) as the
//      module's component-type custom section (`wasm-tools component embed`), then
//   2. lifts it into a component, adapting its wasi_snapshot_preview1 imports to WASI 0.2 with
//      the reactor adapter that jco ships (`wasm-tools component new --adapt`, as
//      `jco new --wasi-reactor` does).
//
//   node guest-sdk/js/bin/weir-wrap-core.js <core.wasm> -o <component.wasm> [--wit <transform.wit>]
//
// Uses the wasm-tools build inside jco (its `jco embed` CLI cannot read WIT files in 1.35.0:
// the WASI sandbox it runs wasm-tools in has no preopened directory, so the WIT is passed as
// a string here).
import { componentEmbed, componentNew } from '@bytecodealliance/jco-transpile/wasm-tools';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

const args = process.argv.slice(2);
const usage = 'usage: weir-wrap-core.js <core.wasm> -o <component.wasm> [--wit <transform.wit>]';
let input;
let out;
let wit = resolve(here, '../../wit/transform.wit');
for (let i = 0; i < args.length; i++) {
  if (args[i] === '-o' || args[i] === '--out') out = args[++i];
  else if (args[i] === '--wit') wit = resolve(args[++i]);
  else if (!args[i].startsWith('-') && input === undefined) input = args[i];
  else {
    console.error(usage);
    process.exit(2);
  }
}
if (!input || !out) {
  console.error(usage);
  process.exit(2);
}

const adapterPath = resolve(here, '../node_modules/@bytecodealliance/jco/lib/wasi_snapshot_preview1.reactor.wasm');
const witSource = await readFile(wit, 'utf8');

const core = await readFile(resolve(input));
const embedded = await componentEmbed({
  binary: core,
  witSource,
  world: 'transform',
  stringEncoding: 'utf8',
  metadata: [['processed-by', [['weir-wrap-core', '0.1.0']]]],
});
const component = await componentNew(embedded, [['wasi_snapshot_preview1', await readFile(adapterPath)]]);

const dest = resolve(out);
await mkdir(dirname(dest), { recursive: true });
await writeFile(`${dest}.tmp`, component);
await rename(`${dest}.tmp`, dest);
console.error(`weir-wrap-core: ${dest} (${component.byteLength} bytes; core module ${core.byteLength} bytes)`);
