/**
 * The API reference at /docs, in a real headless browser: Debian's chromium driven by
 * playwright-core. Without /usr/bin/chromium the test is skipped, except under CI (`CI`
 * set), where `.ci/run` installs it and a missing browser is a failure (docs/testing.md).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { chromium } from 'playwright-core';
import { startTestApi } from '../../helpers/atrium.ts';

const CHROMIUM = '/usr/bin/chromium';
const underCi = Boolean(process.env.CI) && process.env.CI !== 'false' && process.env.CI !== '0';

if (!existsSync(CHROMIUM)) {
  if (underCi) t.fail(`${CHROMIUM} is missing: CI installs Debian's chromium for this test`);
  else t.plan(0, `${CHROMIUM} is missing (apt-get install -y chromium); the browser check runs in CI`);
} else {
  const api = await startTestApi(t);
  const app = api.atrium.app!;
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  const spec = (await app.inject({ method: 'GET', url: '/api/openapi.json' })).json();

  t.test('the reference page is served from the package, with its policy, reading the one spec URL', async (t) => {
    const page = await app.inject({ method: 'GET', url: '/docs/' });
    t.equal(page.statusCode, 200);
    t.match(page.body, /<title>Atrium API reference<\/title>/);
    t.match(page.body, /"url": "\/api\/openapi.json"/);
    t.match(page.body, /"persistAuth": true/);
    t.match(page.body, /<script src="js\/scalar.js"><\/script>/);
    t.notMatch(page.body, /https?:\/\//, 'no absolute URL: nothing is loaded from elsewhere');
    t.match(String(page.headers['content-security-policy']), /script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
    const redirect = await app.inject({ method: 'GET', url: '/docs' });
    t.strictSame([redirect.statusCode, redirect.headers.location], [301, '/docs/']);
    for (const url of ['/docs/json', '/docs/openapi.json', '/docs/openapi.yaml']) {
      t.equal((await app.inject({ method: 'GET', url })).statusCode, 404, `${url}: no second copy of the spec`);
    }
  });

  t.test('in chromium the page renders every tag, loads nothing from another host and logs no error', async (t) => {
    const profile = mkdtempSync(path.join(os.tmpdir(), 'atrium-chromium-'));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    t.teardown(async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    });
    const requested: string[] = [];
    const problems: string[] = [];
    context.on('request', (request) => {
      requested.push(request.url());
    });
    context.on('response', (response) => {
      if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`);
    });
    const page = await context.newPage();
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console: ${message.text()}`);
    });
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));

    await page.goto(`${base}/docs`);
    const tags: string[] = spec.tags.map((tag: { name: string }) => tag.name);
    await page.waitForFunction((names: string[]) => names.every((name) => document.body.innerText.includes(name)), tags, { timeout: 60_000 });
    t.equal(await page.title(), 'Atrium API reference');
    const text = await page.evaluate(() => document.body.innerText);
    for (const tag of tags) t.ok(text.includes(tag), `tag ${tag} is listed`);

    // The webhook is listed in its tag's group.
    await page.locator('button', { hasText: 'Open Group - Automations' }).first().click();
    const webhook: string = spec.webhooks['automation.run'].post.summary;
    await page.waitForFunction((summary: string) => document.body.innerText.includes(summary), webhook, { timeout: 60_000 });
    t.pass('the automation.run webhook is listed under Automations');

    const origin = new URL(base).origin;
    t.strictSame(
      requested.filter((url) => !url.startsWith(origin) && !url.startsWith('data:') && !url.startsWith('blob:')),
      [],
      'no request leaves the service',
    );
    t.ok(requested.includes(`${origin}/api/openapi.json`), 'the spec is read from /api/openapi.json');
    t.strictSame(problems, [], 'no console error');
  });
}
