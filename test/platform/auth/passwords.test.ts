/**
 * Password hashes: Argon2id at the configured cost. A check reads the cost from the stored
 * hash, so hashes of either cost verify whatever the process's own setting.
 */
import t from 'tap';
import { hashPassword, setPasswordHashCost, verifyPassword } from '../../../src/platform/auth/passwords.ts';

t.teardown(() => setPasswordHashCost('standard'));

t.test('the standard cost is the OWASP baseline (m=19 MiB, t=2, p=1)', async (t) => {
  setPasswordHashCost('standard');
  const hash = await hashPassword('correct horse battery');
  t.match(hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
  t.ok(await verifyPassword(hash, 'correct horse battery'));
  t.notOk(await verifyPassword(hash, 'correct horse battery!'));
});

t.test('the test cost is far weaker, and its hashes verify under either setting', async (t) => {
  setPasswordHashCost('test');
  const weak = await hashPassword('correct horse battery');
  t.match(weak, /^\$argon2id\$v=19\$m=256,t=1,p=1\$/);
  setPasswordHashCost('standard');
  t.ok(await verifyPassword(weak, 'correct horse battery'));
  t.notOk(await verifyPassword(weak, 'wrong'));
});

t.test('an unknown user or a hash that is not one answers false', async (t) => {
  t.notOk(await verifyPassword(null, 'anything'));
  t.notOk(await verifyPassword('not-a-hash', 'anything'));
});
