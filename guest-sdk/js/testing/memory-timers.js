// In-memory stand-in for the weir:transform/timers import (tests only): the harness fires them.
const registered = new Map(); // `${clock}|${time}|${latin1 key}` -> [clock, time (bigint), key]
let current = null;

const id = (key, time, domain) => `${domain}|${time}|${Buffer.from(key).toString('latin1')}`;

export function register(key, time, domain) {
  registered.set(id(key, time, domain), [domain, BigInt(time), new Uint8Array(key)]);
}

export function cancel(key, time, domain) {
  registered.delete(id(key, time, domain));
}

export function watermark() {
  return current === null ? undefined : current;
}

/** Test helpers: the registered timers in firing order (domain, time, key), as the host orders
 * them; set the watermark; a copy / replacement of all timers. */
export function __timers() {
  const order = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  return [...registered.values()].sort(
    (a, b) => order(a[0], b[0]) || order(a[1], b[1]) || order(Buffer.from(a[2]).toString('latin1'), Buffer.from(b[2]).toString('latin1')),
  );
}

export function __setWatermark(w) {
  current = w === null ? null : BigInt(w);
}

export function __snapshot() {
  return new Map(registered);
}

export function __restore(snapshot) {
  registered.clear();
  for (const [k, v] of snapshot) registered.set(k, v);
}
