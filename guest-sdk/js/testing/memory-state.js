// In-memory stand-in for the weir:transform/state import (tests only).
const memory = new Map(); // latin1 string of the key bytes -> Uint8Array

const str = (bytes) => Buffer.from(bytes).toString('latin1');
const bytes = (s) => new Uint8Array(Buffer.from(s, 'latin1'));

export function get(key) {
  const v = memory.get(str(key));
  return v === undefined ? undefined : new Uint8Array(v);
}

export function put(key, value) {
  memory.set(str(key), new Uint8Array(value));
}

function del(key) {
  memory.delete(str(key));
}
export { del as delete };

export function scanPrefix(prefix, limit) {
  const p = str(prefix);
  return [...memory.keys()]
    .filter((k) => k.startsWith(p))
    .sort()
    .slice(0, limit)
    .map((k) => [bytes(k), new Uint8Array(memory.get(k))]);
}

/** Test helpers: a copy of all entries (key as text) / replace all entries. */
export function __entries() {
  return new Map([...memory].map(([k, v]) => [Buffer.from(k, 'latin1').toString('utf8'), v]));
}

export function __snapshot() {
  return new Map(memory);
}

export function __restore(snapshot) {
  memory.clear();
  for (const [k, v] of snapshot) memory.set(k, v);
}
