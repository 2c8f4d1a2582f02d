// The host's imports, as componentize-js binds them. Under Node (tests), the module hooks in
// ../testing/register.js resolve these specifiers to an in-memory implementation instead.
export { get, put, delete as del, scanPrefix } from 'weir:transform/state@0.1.0';
export { log } from 'weir:transform/log@0.1.0';
