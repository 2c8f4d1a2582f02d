// The host's imports, as componentize-js binds them. Under Node (tests), the module hooks in
// ../testing/register.js resolve these specifiers to an in-memory implementation instead.
export { get, put, delete as del, scanPrefix } from 'weir:transform/state@0.2.0';
export { log } from 'weir:transform/log@0.2.0';
export { register, cancel, watermark } from 'weir:transform/timers@0.2.0';
