// The dashboard on a live 3-node cluster, in headless chromium: the page shows the leader;
// the Rust test (crates/server/tests/dashboard_browser.rs) kills the leader's process; the
// page shows the new leader, the election in its event log, and the killed member as
// unreachable. Observers get a read-only page, admins the action buttons.
//
//   node tests/browser/dashboard.mjs https://127.0.0.1:PORT/
//
// Environment (set by the Rust test):
//   TENURE_TEST_CERTS   the test cluster's certificate directory (ca.pem, node-N.pem)
//   TENURE_TEST_NODES   the node ids, comma-separated
//   TENURE_VIEWER_TOKEN a bearer token of an observer
//   TENURE_ADMIN_TOKEN  a bearer token of an admin
//   TENURE_EXPECT_LEADER the node the cluster elected
//
// Protocol on stdio: the script prints `leader: N` once the page shows leader N, then waits
// for the line `killed` on stdin before it looks for the new leader.
//
// TLS: the page is served over HTTPS by the nodes' certificates, issued by the test CA.
// Chromium is not told to ignore certificate errors in general: the script checks that each
// node's certificate is issued and signed by the test CA, and pins exactly those keys with
// --ignore-certificate-errors-spki-list (Debian's chromium has no NSS tools to add the CA
// to a profile, and the flag needs only the hashes of the keys the servers present).
// Credentials: a bearer token in every request (extraHTTPHeaders), which is how the server
// authenticates a browser without a client certificate.

import { createInterface } from 'node:readline';
import { run, check, screenshot, env, nodeKeyPins } from './lib.mjs';

const WAIT_MS = 30_000;

const url = process.argv[2];
const certs = env('TENURE_TEST_CERTS');
const nodes = env('TENURE_TEST_NODES').split(',');
const viewerToken = env('TENURE_VIEWER_TOKEN');
const adminToken = env('TENURE_ADMIN_TOKEN');
const expectLeader = env('TENURE_EXPECT_LEADER');

const pins = nodeKeyPins(certs, nodes);

const stdin = createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => stdin.once('line', resolve));

async function openPage(browser, token) {
  const context = await browser.newContext({
    extraHTTPHeaders: { authorization: `Bearer ${token}` },
    viewport: { width: 1400, height: 1000 },
  });
  const page = await context.newPage();
  page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') console.error(`console: ${m.text()}`); });
  const response = await page.goto(url);
  check(response.ok(), `the page loads over HTTPS with the observer's token (HTTP ${response.status()})`);
  return page;
}

await run(async (browser) => {
  // An admin sees the action buttons.
  const adminPage = await openPage(browser, adminToken);
  await adminPage.waitForSelector('#members button[data-action="transfer"]', { state: 'visible', timeout: WAIT_MS });
  check(await adminPage.locator('#viewer').innerText().then((t) => t.includes('(admin)')), 'an admin sees the actions');
  await adminPage.context().close();

  const page = await openPage(browser, viewerToken);
  await page.waitForFunction((n) => {
    const rows = document.querySelectorAll('#members tbody tr[data-member]');
    return document.querySelector('#leader').dataset.leader !== '0'
      && rows.length === n
      && [...rows].every((r) => r.dataset.role !== 'unreachable');
  }, nodes.length, { timeout: WAIT_MS });
  const leader = await page.locator('#leader').getAttribute('data-leader');
  const term = Number(await page.locator('#leader').getAttribute('data-term'));
  check(leader === expectLeader, `the page shows the leader the cluster elected: node ${leader}`);
  // The header's leader is what the serving node knows; each row is that member's own
  // answer, polled on its own: right after an election the two can be a poll apart.
  await page.waitForFunction((l) => document.querySelector(`#members tr[data-member="${l}"]`)?.dataset.role === 'leader',
    leader, { timeout: WAIT_MS }).catch(() => {});
  check(await page.locator(`#members tr[data-member="${leader}"]`).getAttribute('data-role') === 'leader',
    `node ${leader}'s own row says leader`);
  check(await page.locator('#members button').count() === 0
    || !(await page.locator('#members button').first().isVisible()), 'an observer sees no action buttons');
  check((await page.locator('#viewer').innerText()).includes('(read-only)'), 'the observer is told the page is read-only');
  await page.waitForFunction(() => document.querySelector('#stream').textContent.includes('live'), null, { timeout: WAIT_MS });
  await page.waitForSelector('#events li[data-kind]', { timeout: WAIT_MS });
  await page.waitForSelector('#charts svg[data-chart="fsync_ms"]', { timeout: WAIT_MS });
  check(true, 'the event stream is live and the charts are drawn');
  await page.waitForSelector('#elections tr[data-election="billing/nightly"]', { timeout: WAIT_MS });
  check((await page.locator('#elections tr[data-election="billing/nightly"]').innerText()).includes('session'),
    'the election is listed with its holder');
  check(await page.locator('#sessions tbody tr[data-session]').count() === 1, 'its session is listed');
  await screenshot(page, 'dashboard-leader');

  console.log(`leader: ${leader}`);
  const said = await nextLine();
  check(said === 'killed', `the test killed node ${leader}`);

  await page.waitForFunction((old) => {
    const l = document.querySelector('#leader').dataset.leader;
    return l !== '0' && l !== old;
  }, leader, { timeout: WAIT_MS });
  const newLeader = await page.locator('#leader').getAttribute('data-leader');
  check(newLeader !== leader, `the page shows the new leader: node ${newLeader}`);
  const election = page.locator('#events li[data-kind="leader_elected"], #events li[data-kind="leader_known"]')
    .filter({ hasText: `term` });
  await page.waitForFunction(({ old, now }) => [...document.querySelectorAll('#events li')].some((li) =>
    (li.dataset.kind === 'leader_elected' || li.dataset.kind === 'leader_known')
      && Number(li.dataset.term) > old && li.textContent.includes(`node ${now}`)), { old: term, now: newLeader },
  { timeout: WAIT_MS });
  check(await election.count() > 0, `the event log shows node ${newLeader}'s election in a term after ${term}`);
  await page.waitForFunction((old) => document.querySelector(`#members tr[data-member="${old}"]`)?.dataset.role === 'unreachable',
    leader, { timeout: WAIT_MS });
  check(true, `node ${leader}'s row says unreachable`);
  await screenshot(page, 'dashboard-new-leader');
  console.log(`new leader: ${newLeader}`);
  stdin.close();
}, [`--ignore-certificate-errors-spki-list=${pins.join(',')}`]);
