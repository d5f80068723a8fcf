// Builds the served folder web/dist: the ES modules of src/ as they are (no bundler,
// no transpiler), and uPlot's dist files from node_modules (installed by `npm ci`)
// under dist/vendor/. Every module is syntax-checked first. Run: npm run build.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, 'src');
const dist = join(here, 'dist');
const uplot = join(here, 'node_modules', 'uplot', 'dist');

function modules(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return modules(path);
    return name.endsWith('.js') ? [path] : [];
  });
}

if (!existsSync(join(uplot, 'uPlot.esm.js'))) {
  console.error('build: node_modules/uplot is missing: run `npm ci` in web/ first');
  process.exit(1);
}
for (const file of modules(src)) {
  execFileSync(process.execPath, ['--check', file], { stdio: 'inherit' });
}
const staging = `${dist}.tmp`;
rmSync(staging, { recursive: true, force: true });
cpSync(src, staging, { recursive: true });
mkdirSync(join(staging, 'vendor'), { recursive: true });
for (const name of ['uPlot.esm.js', 'uPlot.min.css']) {
  cpSync(join(uplot, name), join(staging, 'vendor', name));
}
cpSync(join(here, 'node_modules', 'uplot', 'LICENSE'), join(staging, 'vendor', 'uPlot.LICENSE'));
rmSync(dist, { recursive: true, force: true });
cpSync(staging, dist, { recursive: true });
rmSync(staging, { recursive: true, force: true });
console.log(`build: ${dist} (${modules(dist).length} modules, uPlot vendored)`);
