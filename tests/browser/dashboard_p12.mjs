// The dashboard with a client certificate from a PKCS#12 bundle, as a person imports one
// into a browser: `tenure certs --p12 admin` wrote client-admin.p12 and its password file.
// Without it the page is a 401 that says how to get in; with it the page loads and
// names the principal the certificate authenticates.
//
//   node tests/browser/dashboard_p12.mjs https://127.0.0.1:PORT/
//
// Environment (set by the Rust test, crates/server/tests/dashboard_browser.rs):
//   TENURE_TEST_CERTS  the test cluster's certificate directory (ca.pem, node-N.pem,
//                      client-admin.p12, client-admin.p12.password)
//   TENURE_TEST_NODE   the node the URL points at
//
// TLS: as in dashboard.mjs, the node's certificate is checked against the test CA here and
// its key pinned for chromium. The client certificate is handed to the browser with
// playwright's clientCertificates (the .p12 file and its password), which is what an
// import into a browser profile does for a person.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { run, check, screenshot, env, nodeKeyPins } from './lib.mjs';

const WAIT_MS = 30_000;
const url = process.argv[2];
const certs = env('TENURE_TEST_CERTS');
const node = env('TENURE_TEST_NODE');

const [pin] = nodeKeyPins(certs, [node]);

await run(async (browser) => {
  // No certificate, no token: a 401 that tells a person what to do.
  const bare = await browser.newContext();
  const refused = await bare.newPage();
  const response = await refused.goto(url);
  check(response.status() === 401, `without credentials the page is refused (HTTP ${response.status()})`);
  const body = await refused.locator('body').innerText();
  check(body.includes('tenure certs --out DIR --p12 NAME'), `the refusal names the bundle to import: ${body}`);
  await bare.close();

  // The bundle, as imported into the browser.
  const origin = new URL(url).origin;
  const context = await browser.newContext({
    clientCertificates: [{
      origin,
      pfxPath: join(certs, 'client-admin.p12'),
      passphrase: readFileSync(join(certs, 'client-admin.p12.password'), 'utf8').trim(),
    }],
    viewport: { width: 1400, height: 1000 },
  });
  const page = await context.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
  const ok = await page.goto(url);
  check(ok.ok(), `with the bundle the page loads (HTTP ${ok.status()})`);
  await page.waitForFunction(() => document.querySelector('#viewer')?.textContent.includes('(admin)'),
    null, { timeout: WAIT_MS });
  const viewer = await page.locator('#viewer').innerText();
  check(viewer.includes('admin'), `the page names the certificate's principal: ${viewer}`);
  await page.waitForFunction(() => document.querySelector('#leader')?.dataset.leader !== '0',
    null, { timeout: WAIT_MS });
  check(true, `the page shows a leader: node ${await page.locator('#leader').getAttribute('data-leader')}`);
  await screenshot(page, 'dashboard-p12');
  await context.close();
}, [`--ignore-certificate-errors-spki-list=${pin}`]);
