/**
 * Password hashes: Argon2id at the configured cost. A check reads the cost from the stored
 * hash, so hashes of either cost verify whatever the process's own setting.
 */
import t from 'tap';
import { Algorithm, Version, hash, verify } from '@node-rs/argon2';
import {
  checkPassword,
  hashPassword,
  needsRehash,
  renewedHash,
  setPasswordHashCost,
  signInShare,
  verifyPassword,
} from '../../../src/platform/auth/passwords.ts';

t.teardown(() => setPasswordHashCost('standard'));

t.test('the standard cost is the OWASP baseline (m=19 MiB, t=2, p=1)', async (t) => {
  setPasswordHashCost('standard');
  const hash = await hashPassword('correct horse battery', 0);
  t.match(hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
  t.ok(await verifyPassword(hash, 'correct horse battery', 0));
  t.notOk(await verifyPassword(hash, 'correct horse battery!', 0));
});

t.test('the test cost is far weaker, and its hashes verify under either setting', async (t) => {
  setPasswordHashCost('test');
  const weak = await hashPassword('correct horse battery', 0);
  t.match(weak, /^\$argon2id\$v=19\$m=256,t=1,p=1\$/);
  setPasswordHashCost('standard');
  t.ok(await verifyPassword(weak, 'correct horse battery', 0));
  t.notOk(await verifyPassword(weak, 'wrong', 0));
});

t.test('a password is the same password however its characters are encoded (NFKC)', async (t) => {
  setPasswordHashCost('test');
  const composed = 'caf\u00e9 \uff11\uff12\uff13 r\u00e9sum\u00e9';
  const decomposed = 'cafe\u0301 123 re\u0301sume\u0301';
  const stored = await hashPassword(decomposed, 0);
  t.ok(await verifyPassword(stored, composed, 0), 'an accented letter as one code point, full-width digits');
  t.ok(await verifyPassword(stored, decomposed, 0), 'the form it was set in');
  t.notOk(await verifyPassword(stored, 'cafe 123 resume', 0), 'the letters without their accents are another password');
  setPasswordHashCost('standard');
});

t.test('a hash made of the password as typed, before passwords were normalized, still verifies', async (t) => {
  const typed = 'cafe\u0301 au lait';
  const legacy = await hash(typed, { algorithm: Algorithm.Argon2id, memoryCost: 256, timeCost: 1, parallelism: 1 });
  t.ok(await verifyPassword(legacy, typed, 0), 'the same code points');
  t.notOk(await verifyPassword(legacy, 'cafe\u0301 au laid', 0));
  t.notOk(await verifyPassword(null, typed, 0), 'an unknown user, with a password whose normalized form differs');
});

t.test('a hash needs renewing when its algorithm, version, m, t or p are not those of the configured cost', async (t) => {
  const test = { memoryCost: 256, timeCost: 1, parallelism: 1 };
  setPasswordHashCost('test');
  t.notOk(needsRehash(await hashPassword('correct horse battery', 0)), 'one hashPassword makes now');
  t.notOk(needsRehash(await hash('x', { algorithm: Algorithm.Argon2id, ...test })), 'the same parameters, made elsewhere');
  const others: [string, Parameters<typeof hash>[1]][] = [
    ['Argon2i', { algorithm: Algorithm.Argon2i, ...test }],
    ['Argon2d', { algorithm: Algorithm.Argon2d, ...test }],
    ['version 0x10', { algorithm: Algorithm.Argon2id, ...test, version: Version.V0x10 }],
    ['more memory', { algorithm: Algorithm.Argon2id, ...test, memoryCost: 2048 }],
    ['less memory', { algorithm: Algorithm.Argon2id, ...test, memoryCost: 128 }],
    ['more passes', { algorithm: Algorithm.Argon2id, ...test, timeCost: 2 }],
    ['more lanes', { algorithm: Algorithm.Argon2id, ...test, parallelism: 2 }],
    ['the standard cost', { algorithm: Algorithm.Argon2id }],
  ];
  for (const [name, options] of others) t.ok(needsRehash(await hash('x', options)), name);
  t.ok(needsRehash('not-a-hash'), 'a string that is no hash');
  setPasswordHashCost('standard');
  t.notOk(needsRehash(await hash('x', { algorithm: Algorithm.Argon2id })), "under the standard cost, the library's default is current");
  t.ok(needsRehash(await hash('x', { algorithm: Algorithm.Argon2id, ...test })), 'and the test cost is not');
});

t.test('a check tells a current hash from an outdated one, which a renewed hash replaces', async (t) => {
  setPasswordHashCost('test');
  const test = { algorithm: Algorithm.Argon2id, memoryCost: 256, timeCost: 1, parallelism: 1 };
  const typed = 'cafe\u0301 au lait';
  const current = await hashPassword(typed, 0);
  t.equal(await checkPassword(current, typed, 0), 'current');
  t.equal(await checkPassword(current, 'cafe au lait', 0), 'wrong');
  t.equal(await checkPassword(null, typed, 0), 'wrong', 'no hash');
  const otherCost = await hash(typed.normalize('NFKC'), { ...test, timeCost: 2 });
  t.equal(await checkPassword(otherCost, typed, 0), 'outdated', 'made at another cost');
  t.equal(await checkPassword(otherCost, 'cafe au lait', 0), 'wrong');
  const asTyped = await hash(typed, test);
  t.equal(await checkPassword(asTyped, typed, 0), 'outdated', 'of the password as typed');

  const renewed = await renewedHash(asTyped, typed, 0);
  t.notOk(needsRehash(renewed), 'the renewed hash is current');
  t.ok(await verify(renewed, typed.normalize('NFKC')), 'of the normalized form');
  t.equal(await checkPassword(renewed, typed, 0), 'current');
  t.equal(await renewedHash(asTyped, typed, 0), renewed, 'renewing the same hash again makes the same one');
  const saltOf = (h: string) => h.split('$')[4];
  t.not(saltOf(await renewedHash(otherCost, typed, 0)), saltOf(renewed), 'renewing another hash makes another salt');
  t.not(saltOf(renewed), saltOf(asTyped));
  setPasswordHashCost('standard');
});

t.test('an unknown user or a hash that is not one answers false', async (t) => {
  t.notOk(await verifyPassword(null, 'anything', 0));
  t.notOk(await verifyPassword('not-a-hash', 'anything', 0));
});

t.test("one tenant's many hashes do not hold up another tenant's check", async (t) => {
  setPasswordHashCost('test');
  const stored = await hashPassword('the other tenant', 2);
  const finished: string[] = [];
  // Tenant 1 sets forty passwords at once (a sync, a script); then a user of tenant 2 signs in.
  const flood = Array.from({ length: 40 }, (_, i) => hashPassword(`password ${i}`, 1).then(() => finished.push(`tenant 1, hash ${i}`)));
  const check = verifyPassword(stored, 'the other tenant', 2).then((matches) => {
    finished.push('tenant 2');
    return matches;
  });
  t.ok(await check, 'the check answers');
  await Promise.all(flood);
  // Places are as many as the cores, at most four: the check waits for one of tenant 1's, not for all forty.
  const position = finished.indexOf('tenant 2') + 1;
  t.ok(position <= 10, `the check was done in place ${position} of 41`);
  setPasswordHashCost('standard');
});

t.test('a sign-in waits under a share of the tenant name it gives, one of sixteen, whether or not a tenant has it', async (t) => {
  t.equal(signInShare('acme'), signInShare('acme'), 'the same share for the same name');
  const shares = new Set(Array.from({ length: 1000 }, (_, i) => signInShare(`made-up-${i}`)));
  t.equal(shares.size, 16, 'a thousand names take sixteen shares');
  t.ok(
    [...shares].every((share) => share < 0),
    'none of them a tenant id',
  );
  setPasswordHashCost('test');
  /** Where a sign-in naming `probeName` finishes among forty naming `floodName` at once (each checked against the dummy hash). */
  const probePosition = async (floodName: string, probeName: string) => {
    const finished: string[] = [];
    const flood = Array.from({ length: 40 }, (_, i) => verifyPassword(null, `guess ${i}`, signInShare(floodName)).then(() => finished.push('flood')));
    const probe = verifyPassword(null, 'a guess', signInShare(probeName)).then(() => finished.push('probe'));
    await Promise.all([...flood, probe]);
    return finished.indexOf('probe') + 1;
  };
  const otherName = Array.from({ length: 100 }, (_, i) => `another-${i}`).find((name) => signInShare(name) !== signInShare('made-up'))!;
  const other = await probePosition('made-up', otherName);
  t.ok(other <= 10, `a sign-in under another share was done in place ${other} of 41`);
  const same = await probePosition('made-up', 'made-up');
  t.ok(same > 30, `one naming the same name waits behind them: place ${same} of 41`);
  // Forty names of every share at once: a tenant's own check still waits for a few of them, not all forty.
  const mine = await hashPassword('mine', 0);
  const finished: string[] = [];
  const spread = Array.from({ length: 40 }, (_, i) => verifyPassword(mine, 'guess', signInShare(`made-up-${i}`)).then(() => finished.push('flood')));
  const own = verifyPassword(mine, 'mine', 7).then(() => finished.push('tenant'));
  await Promise.all([...spread, own]);
  const place = finished.indexOf('tenant') + 1;
  t.ok(place <= 20, `a tenant's own check beside them was done in place ${place} of 41`);
  setPasswordHashCost('standard');
});
