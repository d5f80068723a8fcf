// src/charts.js imports the vendored uPlot (dist/vendor/uPlot.esm.js, copied there by
// build.mjs); tsconfig.json's rootDirs finds this file in its place, with uplot's types.
export { default } from 'uplot';
