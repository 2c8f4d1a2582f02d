// Entry module of the flight-delays-js component: exports the world's functions.
import { exportTransform } from '../../guest-sdk/js/src/index.js';
import { FlightDelays } from './flight-delays.js';

export const { init, process, snapshot, restore, onTimer } = exportTransform(FlightDelays);
