import t from 'tap';
import { Secrets, instanceSecret } from '../../../src/platform/secrets/secrets.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const api = await startTestApi(t);
const { db, secrets } = api.atrium.services;

t.test('the master key is generated once and shared by every loader', async (t) => {
  const again = await Secrets.load(db, undefined);
  t.equal(again.sign('x', 'message'), secrets.sign('x', 'message'));
  await t.rejects(Secrets.load(db, 'c2hvcnQ='), /32 bytes/);
});

t.test('a key other than the one the database was first used with is refused, not used', async (t) => {
  // The generated key's database, now with ATRIUM_SECRET_KEY set (a compose .env beside the checkout's npm start):
  // the operator never had a key, so the answer is to unset it, not to find "the key it was first used with".
  await t.rejects(Secrets.load(db, Buffer.alloc(32, 7).toString('base64')), {
    message:
      'ATRIUM_SECRET_KEY is set, but this database was first started without it and keeps a key it generated then: unset ATRIUM_SECRET_KEY (the key is never changed).',
  });
  // A database first used with a configured key: that key again works; another, or none, is refused.
  const other = await startTestDatabase(t);
  const key = Buffer.alloc(32, 9).toString('base64');
  const first = await Secrets.load(other.db, key);
  t.equal((await Secrets.load(other.db, key)).sign('x', 'm'), first.sign('x', 'm'), 'the same key again');
  await t.rejects(Secrets.load(other.db, Buffer.alloc(32, 8).toString('base64')), /is not the key this database's secrets were sealed with/);
  await t.rejects(Secrets.load(other.db, undefined), /ATRIUM_SECRET_KEY is not set, but this database's secrets were sealed with a key given in it/);
});

t.test('concurrent first use agrees on one value', async (t) => {
  let n = 0;
  const values = await Promise.all(Array.from({ length: 5 }, () => instanceSecret(db, 'race', () => `value-${++n}`)));
  t.equal(new Set(values).size, 1);
});

t.test('signatures verify only for the same purpose and message', async (t) => {
  const signature = secrets.sign('picture-url', '/users/1/profile-picture?expires=1');
  t.ok(secrets.verify('picture-url', '/users/1/profile-picture?expires=1', signature));
  t.notOk(secrets.verify('picture-url', '/users/2/profile-picture?expires=1', signature));
  t.notOk(secrets.verify('other', '/users/1/profile-picture?expires=1', signature));
  t.notOk(secrets.verify('picture-url', '/users/1/profile-picture?expires=1', 'short'));
});

t.test('encryption round-trips, is randomised, and detects tampering', async (t) => {
  const sealed = secrets.encrypt('webhook-secrets', 'p4ssw0rd');
  t.not(sealed, secrets.encrypt('webhook-secrets', 'p4ssw0rd'));
  t.notMatch(sealed, /p4ssw0rd/);
  t.equal(secrets.decrypt('webhook-secrets', sealed), 'p4ssw0rd');
  t.throws(() => secrets.decrypt('other-purpose', sealed));
  const parts = sealed.split('.');
  parts[3] = Buffer.from('tampered').toString('base64url');
  t.throws(() => secrets.decrypt('webhook-secrets', parts.join('.')));
});

t.test('the application role cannot read installation secrets', async (t) => {
  await t.rejects(db.appSql`select * from instance_secrets`, /permission denied/);
});
