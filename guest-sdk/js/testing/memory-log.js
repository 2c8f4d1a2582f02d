// Stand-in for the weir:transform/log import (tests only): lines go to stderr, and are kept.
export const lines = [];

export function log(level, message) {
  lines.push([level, message]);
  if (process.env.WEIR_TEST_LOG) process.stderr.write(`[${level}] ${message}\n`);
}
