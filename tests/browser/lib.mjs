// The browser-test harness: Debian's headless chromium driven by playwright-core.
//
// A browser test is a script in this folder, run as `node tests/browser/NAME.mjs URL` by a
// Rust integration test that started the server it points at. The script exits 0 when every
// check passed; otherwise it prints what it saw and exits non-zero (1 for a failed check, 2
// for a missing browser or package). Screenshots go to artifactDir(), and their paths are
// printed as `screenshot: PATH` lines so that the Rust test can pass them on.
//
//   import { launch, artifactDir, screenshot, check } from './lib.mjs';
//   const browser = await launch();
//   const page = await browser.newPage();
//   await page.goto(process.argv[2]);
//   ...
//   await screenshot(page, 'ballot-split-vote');
//   await browser.close();
//
// Installation: `scripts/services.sh install-browser` (apt-get `chromium`, `npm ci` here).

import { X509Certificate, createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** Where Debian's `chromium` package puts the browser. */
export const CHROMIUM = process.env.TENURE_CHROMIUM || '/usr/bin/chromium';

const INSTALL_HINT = 'run scripts/services.sh install-browser';

/** Exits with status 2 and a message naming the install command. */
function missing(what) {
  console.error(`browser harness: ${what} is missing: ${INSTALL_HINT}`);
  process.exit(2);
}

// The flags this closed network needs: no sandbox (the tests run as root), no GPU, and
// nothing that reaches out on its own (QUIC probes, component updates, sync, background
// fetches), so that the only traffic is the test's own page on loopback.
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Starts headless chromium and returns playwright's Browser. Each launch has a fresh,
 * empty profile: playwright's launch() makes a new user-data-dir for every browser it starts
 * (and removes it on close), so no state leaks from one test to the next. `extraArgs` are
 * more chromium flags (the dashboard's test pins the test cluster's certificates with one).
 */
export async function launch(extraArgs = []) {
  if (!existsSync(CHROMIUM)) missing(`chromium (${CHROMIUM})`);
  let chromium;
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (e) {
    missing(`the npm package playwright-core (tests/browser/node_modules: ${e.code || e.message})`);
  }
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: [...FLAGS, ...extraArgs] });
}

/**
 * The folder for screenshots and other artifacts, created if needed:
 * $TENURE_ARTIFACTS, else $CARGO_TARGET_DIR/artifacts/browser (the default target directory
 * of scripts/env.sh when CARGO_TARGET_DIR is unset).
 */
export function artifactDir() {
  const target = process.env.CARGO_TARGET_DIR || join(homedir(), '.cache', 'tenure', 'target');
  const dir = process.env.TENURE_ARTIFACTS || join(target, 'artifacts', 'browser');
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Saves a full-page screenshot as artifactDir()/NAME.png and prints its path. */
export async function screenshot(page, name) {
  const path = join(artifactDir(), `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
  return path;
}

/** Throws (so the script exits 1 with this message) unless `ok`. */
export function check(ok, message) {
  if (!ok) throw new Error(`check failed: ${message}`);
  console.log(`ok: ${message}`);
}

/**
 * Runs `body(browser)` with a launched browser, closes it, and sets the exit status: 0 when
 * body returned, 1 with the error printed when it threw. A test script's whole main.
 */
export async function run(body, extraArgs = []) {
  const browser = await launch(extraArgs);
  try {
    await body(browser);
    console.log('browser test passed');
  } catch (e) {
    console.error(e && e.stack ? e.stack : String(e));
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
}

/** The environment variable `name`, set by the Rust test that runs the script. */
export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (this script is run by a Rust test)`);
  return v;
}

/**
 * The SHA-256 of each node's public key (base64), for chromium's
 * --ignore-certificate-errors-spki-list, after checking that each node certificate in
 * `certs` (node-ID.pem) is issued and signed by that directory's CA: the pages' TLS is
 * trusted for exactly the test cluster's keys, never in general.
 */
export function nodeKeyPins(certs, ids) {
  const ca = new X509Certificate(readFileSync(join(certs, 'ca.pem')));
  return ids.map((id) => {
    const cert = new X509Certificate(readFileSync(join(certs, `node-${id}.pem`)));
    if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) {
      throw new Error(`node-${id}.pem is not signed by the test CA`);
    }
    const spki = cert.publicKey.export({ type: 'spki', format: 'der' });
    return createHash('sha256').update(spki).digest('base64');
  });
}
