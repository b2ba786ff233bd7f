// Browser test of the ballot page (`tenure ballot`): run as `node tests/browser/ballot.mjs URL`
// by crates/cli/tests/ballot_browser.rs. Takes a step by hand (a bad one is refused); plays
// the split vote and checks "no leader in term 2" then a leader in term 3; plays the paused
// leader's late write, rejected by the fence; turns the bully toggle on under a partition and
// checks two coordinators next to Raft's one leader per term; opens the share link in a
// fresh page and checks that it shows the same state. Screenshots: ballot-*.png.

import { run, screenshot, check } from './lib.mjs';

const url = process.argv[2];
if (!url) {
  console.error('usage: node tests/browser/ballot.mjs URL');
  process.exit(2);
}

const text = (page, selector) => page.locator(selector).innerText();

await run(async (browser) => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(url);
  await page.waitForSelector('button[data-scenario="split-vote"]');

  // A step taken by hand: a bad one is refused with a message, a good one is taken.
  await page.fill('#typed', 'jump-3');
  await page.click('#typed-go');
  await page.waitForFunction(() => document.getElementById('error').textContent.includes('not a step'));
  check(true, 'a bad step is refused with a message');
  await page.fill('#typed', 'wait-40');
  await page.click('#typed-go');
  await page.waitForSelector('.card.leader');
  check((await page.locator('#nodes .card.leader').count()) === 1, 'waiting elects one leader');

  // The split vote.
  await page.click('button[data-scenario="split-vote"]');
  await page.waitForSelector('tr[data-term="3"].has-leader');
  const term2 = await text(page, 'tr[data-term="2"] .outcome');
  const term3 = await text(page, 'tr[data-term="3"] .outcome');
  check(term2.includes('term 2: no leader') && term2.includes('split vote'), `term 2 has no leader: "${term2}"`);
  check(/term 3: leader: node \d/.test(term3), `term 3 elects a leader: "${term3}"`);
  const log = await text(page, '#log');
  check(log.includes('no leader in term 2: split vote'), 'the ballot log says there was no leader in term 2');
  check(log.includes('node 3 voted for node 1 in term 2'), 'the ballot log names the votes');
  await screenshot(page, 'ballot-split-vote');

  // The leader paused past its lease: its late write with the old token meets the fence.
  await page.click('button[data-scenario="fence"]');
  await page.waitForFunction(() => document.getElementById('fence').textContent.includes('highest token accepted: 2'));
  const fenceLog = await text(page, '#log');
  check(fenceLog.includes("the fence REJECTS node 5's late write with old token 1"), 'the late write with token 1 is rejected');
  await screenshot(page, 'ballot-fence');

  // Bully under the partition.
  await page.click('button[data-scenario="partition"]');
  await page.waitForFunction(() => document.getElementById('steps').textContent.includes('partition-4.5'));
  check(await page.locator('#bully').isHidden(), 'the bully view starts hidden');
  await page.check('#bully-toggle');
  await page.waitForSelector('#bully', { state: 'visible' });
  const coords = await text(page, '#bully-coordinators');
  check(coords.includes('3 and 5') && coords.includes('2 coordinators at once'), `bully: "${coords}"`);
  check((await page.locator('#bully-nodes .card.coordinator').count()) === 2, 'two coordinator cards');
  const raft = await text(page, '#raft-leaders');
  check(/term 1: node 5 · term 2: node \d \(at most one each\)/.test(raft), `Raft: "${raft}"`);
  await screenshot(page, 'ballot-bully-partition');

  // The share link replays the same state in a fresh page.
  const share = await page.locator('#share').getAttribute('href');
  check(share.includes('steps=') && share.includes('seed=7'), `share link holds seed and steps: ${share}`);
  const before = {
    steps: await text(page, '#steps'),
    nodes: await text(page, '#nodes'),
    terms: await text(page, '#terms'),
    log: await text(page, '#log'),
    bully: await text(page, '#bully-coordinators'),
  };
  const again = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await again.goto(share);
  await again.waitForFunction(
    (steps) => document.getElementById('steps').textContent === steps, before.steps);
  for (const [what, value] of Object.entries(before)) {
    const selector = { steps: '#steps', nodes: '#nodes', terms: '#terms', log: '#log', bully: '#bully-coordinators' }[what];
    check((await text(again, selector)) === value, `the share link replays the same ${what}`);
  }
  await screenshot(again, 'ballot-share-link');
});
