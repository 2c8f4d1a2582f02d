// Lets Node run transforms natively, for tests: resolves the component's imports
// ('weir:transform/state@0.2.0', 'weir:transform/log@0.2.0', 'weir:transform/timers@0.2.0') to
// in-memory stand-ins.
//
//   node --import ./guest-sdk/js/testing/register.js --test
import { register } from 'node:module';

register('./hooks.js', import.meta.url);
