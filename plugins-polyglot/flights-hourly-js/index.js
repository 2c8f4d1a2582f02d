// Entry module of the flights-hourly-js component: exports the world's functions.
import { exportTransform } from '../../guest-sdk/js/src/index.js';
import { FlightsHourly } from './flights-hourly.js';

export const { init, process, snapshot, restore, onTimer } = exportTransform(FlightsHourly);
