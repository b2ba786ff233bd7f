// Browser test of the ballot page (`tenure ballot`): run as `node tests/browser/ballot.mjs URL`
// by crates/cli/tests/ballot_browser.rs. Takes a step by hand (a bad one is refused); stops
// the leader's heartbeats and times out a follower, and checks that the page says why its
// pre-votes are refused (the followers keep the leader's lease, until which tick) and what
// would make them succeed, that the deliver button toward the paused leader is disabled
// with the reason as its tooltip, and that a refused step shows its reason and remedy;
// steps through the split vote one step at a time (the next step named on its button, the
// share link reopening the scenario at that step) and runs it to the end; starts from the
// established cluster (term 41, node 1 leading) and reopens it from its share link; plays
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

  // The first path a person takes: stop the leader's heartbeats, time out a follower. The
  // followers still keep the leader's lease; the page says so, and what would help.
  await page.click('header button[data-step="settle"]');
  await page.waitForFunction(() => document.getElementById('in-flight').textContent === 'nothing in flight');
  const leaderId = await page.locator('#nodes .card.leader').getAttribute('data-node');
  const follower = leaderId === '1' ? '2' : '1';
  const other = ['1', '2', '3', '4', '5'].find((id) => id !== leaderId && id !== follower);
  await page.click(`.card[data-node="${leaderId}"] button[data-step="pause-${leaderId}"]`);
  await page.waitForSelector(`.card.paused[data-node="${leaderId}"]`);
  const timeOut = page.locator(`.card[data-node="${follower}"] button[data-step="timeout-${follower}"]`);
  check((await timeOut.getAttribute('title')).includes('(at its tick'), 'the time out button says when the timer fires');
  await timeOut.click();
  await page.waitForFunction(() => document.getElementById('log').textContent.includes('cannot win its pre-vote yet'));
  const forecast = (await text(page, '#log')).split('\n').find((l) => l.includes('cannot win its pre-vote yet'));
  check(/heard from leader \d at tick 40 and refuse every vote until tick 55 \(T = 15 ticks\)/.test(forecast),
    `the log says the followers keep the leader's lease until tick 55: "${forecast}"`);
  check(/To make it possible: wait \d+ ticks \(by then node \d times out and wins term 2\)/.test(forecast),
    `the log says what would make it possible: "${forecast}"`);
  check((await text(page, `.card[data-node="${other}"] .timers`)).includes(`refuses votes until tick 55 (heard leader ${leaderId} at tick 40)`),
    'a follower card shows until when it refuses votes');
  // Deliver toward the paused leader: disabled, with the reason as its tooltip.
  const toLeader = page.locator(`#in-flight button[data-step="deliver-${follower}-${leaderId}"]`);
  check(await toLeader.isDisabled(), 'deliver toward the paused leader is disabled');
  const tip = await toLeader.getAttribute('title');
  check(tip === `node ${leaderId} is paused, so it receives nothing: resume node ${leaderId} first (the message waits in flight), or drop it`,
    `its tooltip says why and what would make it possible: "${tip}"`);
  check(await page.locator(`#in-flight button[data-step="drop-${follower}-${leaderId}"]`).isEnabled(), 'dropping it still applies');
  const resume = page.locator(`.card[data-node="${follower}"] button[data-step="resume-${follower}"]`);
  check(await resume.isDisabled(), 'resume on a running node is disabled');
  check((await resume.getAttribute('title')).startsWith(`node ${follower} is running, not paused`), 'and says why');
  check(await page.locator(`.card[data-node="${leaderId}"] button[data-step="resume-${leaderId}"]`).isEnabled(), 'resume on the paused leader applies');
  // Typed anyway, the step is refused with its reason and remedy on the page.
  await page.fill('#typed', `deliver-${follower}-${leaderId}`);
  await page.click('#typed-go');
  await page.waitForFunction(() => document.getElementById('error').textContent.includes('so it receives nothing'));
  check((await text(page, '#remedy')) === `To make it possible: resume node ${leaderId} first (the message waits in flight), or drop it.`,
    'the refused step shows what would make it possible');
  // Delivering a pre-vote to a follower: refused, and the log says why.
  await page.click(`#in-flight button[data-step="deliver-${follower}-${other}"]`);
  await page.waitForFunction(() => document.getElementById('log').textContent.includes("pre-vote request for term 2, because"));
  const refusal = (await text(page, '#log')).split('\n').find((l) => l.includes('pre-vote request for term 2, because'));
  check(refusal.includes(`node ${other} refuses node ${follower}'s pre-vote request for term 2, because node ${other} heard from leader ${leaderId} at tick 40 and keeps leader ${leaderId}'s lease until tick 55`),
    `the refused pre-vote says why: "${refusal}"`);
  check((await text(page, '#error')) === '', 'a step taken clears the last refusal');
  await screenshot(page, 'ballot-refusal');

  // A prepared scenario, one step at a time.
  await page.click('button[data-step-through="split-vote"]');
  await page.waitForSelector('#player', { state: 'visible' });
  const where0 = await text(page, '#player-where');
  const total = Number(/step 0 of (\d+)/.exec(where0)?.[1]);
  check(total > 30, `the scenario loads at its first step: "${where0}"`);
  check((await text(page, '#next')) === 'next step: wait-40', 'the next step is named on its button');
  check((await text(page, '#next-does')).startsWith('let 40 ticks pass'), 'and said in words');
  check((await page.locator('#terms tbody tr').count()) === 0, 'nothing has happened yet');
  await page.click('#next');
  await page.waitForFunction(() => document.getElementById('player-where').textContent.includes('step 1 of'));
  check((await text(page, '#steps')) === 'wait-40', 'one step taken');
  check((await text(page, '#next')) === 'next step: settle', 'the button names the following step');
  await page.click('#next');
  await page.waitForFunction(() => document.getElementById('player-where').textContent.includes('step 2 of'));
  check((await text(page, '#next')) === 'next step: pause-5', 'one more step');
  const stepLink = await page.locator('#share').getAttribute('href');
  check(stepLink.includes('scenario=split-vote') && stepLink.includes('steps=wait-40%2Csettle'),
    `the share link holds the position: ${stepLink}`);
  const reopened = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await reopened.goto(stepLink);
  await reopened.waitForSelector('#player', { state: 'visible' });
  await reopened.waitForFunction(() => document.getElementById('player-where').textContent.includes('step 2 of'));
  check((await text(reopened, '#next')) === 'next step: pause-5', 'the link reopens the scenario at the same step');
  check((await text(reopened, '#nodes')) === (await text(page, '#nodes')), 'with the same cluster');
  await reopened.close();
  await page.click('#run-to-end');
  await page.waitForSelector('tr[data-term="3"].has-leader');
  check((await text(page, '#player-where')) === `scenario split-vote: step ${total} of ${total}`, 'run to end takes every step');
  check(await page.locator('#next').isDisabled(), 'no next step at the end');
  await screenshot(page, 'ballot-step-through');

  // The established start: term 41, node 1 leading.
  await page.selectOption('#start', 'term41');
  await page.click('#new');
  await page.waitForSelector('.card.leader[data-node="1"]');
  check((await text(page, '.card[data-node="1"]')).includes('term 41'), 'node 1 leads term 41');
  check((await page.locator('#nodes .card.follower').count()) === 4, 'the four others follow it');
  check((await text(page, '#summary')).includes('latest term 41: leader: node 1'), 'the summary names term 41 and its leader');
  check(await page.locator('#player').isHidden(), 'no scenario is loaded');
  const t41 = await page.locator('#share').getAttribute('href');
  check(t41.includes('start=term41'), `the share link holds the start: ${t41}`);
  const again41 = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await again41.goto(t41);
  await again41.waitForSelector('.card.leader[data-node="1"]');
  check((await text(again41, '#nodes')) === (await text(page, '#nodes')), 'the term 41 link replays the same cluster');
  check((await again41.locator('#start').inputValue()) === 'term41', 'and shows its start');
  await again41.close();
  await screenshot(page, 'ballot-term41');

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
