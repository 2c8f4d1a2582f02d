// Node module resolution hooks (see register.js).
const stand_ins = {
  'weir:transform/state@0.2.0': new URL('./memory-state.js', import.meta.url).href,
  'weir:transform/log@0.2.0': new URL('./memory-log.js', import.meta.url).href,
  'weir:transform/timers@0.2.0': new URL('./memory-timers.js', import.meta.url).href,
};

export async function resolve(specifier, context, nextResolve) {
  const url = stand_ins[specifier];
  if (url) return { url, shortCircuit: true, format: 'module' };
  return nextResolve(specifier, context);
}
