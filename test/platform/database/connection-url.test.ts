/**
 * Database connection URLs with one host or several (src/platform/database/connection-url.ts):
 * what the configuration accepts, and the parts Atrium reads from them.
 */
import t from 'tap';
import { driverUrl, formatConnectionUrl, parseConnectionUrl } from '../../../src/platform/database/connection-url.ts';

t.test('malformed URLs are refused', async (t) => {
  for (const value of [
    '',
    'garbage',
    'mysql://u:p@h/db',
    'postgres://',
    'postgres://u:p@/db',
    'postgres//u:p@h/db',
    'postgres://u:p@h1,/db',
    'postgres://u:p@,h2/db',
    'postgres://u:p@h1:0/db',
    'postgres://u:p@h1:65536/db',
    'postgres://u:p@h1:54x/db',
    'postgres://u:p@h 1/db',
    'postgres://u:%zz@h/db',
    'postgres://u:p@h1,h2/db?target_session_attrs=any',
    'postgres://u:p@h1,h2/db?target_session_attrs=',
    'postgres://u:p@[::1]:5432,h2/db',
    // A bracket written encoded is no IPv6 address: the driver would be given an invalid URL.
    'postgres://u:p@%5B/db',
    'postgres://u:p@%5Bx%5D/db',
    'postgres://u:p@%5B%3A%3A1%5D:5432/db',
    // An sslmode libpq does not know: the driver would take it as verify-full.
    'postgres://u:p@h/db?sslmode=bogus',
    'postgres://u:p@h/db?sslmode=',
    'postgres://u:p@h/db?sslmode=disable&sslmode=bogus',
  ]) {
    t.equal(parseConnectionUrl(value), null, JSON.stringify(value));
  }
});

t.test('one host, as before', async (t) => {
  t.strictSame(parseConnectionUrl('postgres://atrium:s%40cret@db.example.com:5432/atrium'), {
    scheme: 'postgres',
    user: 'atrium',
    password: 's@cret',
    hosts: [{ host: 'db.example.com', port: 5432 }],
    database: 'atrium',
    params: new URLSearchParams(),
  });
  const bare = parseConnectionUrl('postgresql://db')!;
  t.strictSame([bare.user, bare.password, bare.hosts, bare.database], ['', '', [{ host: 'db', port: undefined }], '']);
  t.strictSame(parseConnectionUrl('postgres://u@[::1]:5433/db')!.hosts, [{ host: '[::1]', port: 5433 }]);
});

t.test('several hosts, each with its port or none, and the session wanted', async (t) => {
  const url = parseConnectionUrl('postgres://atrium:pw@db1:5432,db2,10.0.0.3:6432/atrium?target_session_attrs=read-write&sslmode=require')!;
  t.strictSame(url.hosts, [
    { host: 'db1', port: 5432 },
    { host: 'db2', port: undefined },
    { host: '10.0.0.3', port: 6432 },
  ]);
  t.equal(url.user, 'atrium');
  t.equal(url.password, 'pw');
  t.equal(url.database, 'atrium');
  t.equal(url.params.get('target_session_attrs'), 'read-write');
  t.equal(url.params.get('sslmode'), 'require');
});

t.test('a password holding an unencoded @ or : is read as libpq reads it', async (t) => {
  const url = parseConnectionUrl('postgres://atrium:p@ss:word@db1,db2/atrium')!;
  t.equal(url.password, 'p@ss:word');
  t.strictSame(
    url.hosts.map((h) => h.host),
    ['db1', 'db2'],
  );
});

t.test('formatting gives back a URL that reads the same', async (t) => {
  for (const value of [
    'postgres://atrium:s%40cret%2F1@db1:5432,db2:5433/my%20db?target_session_attrs=read-write',
    'postgresql://db',
    'postgres://u@[::1]:5433/db',
  ]) {
    const parsed = parseConnectionUrl(value)!;
    const again = parseConnectionUrl(formatConnectionUrl(parsed))!;
    t.strictSame({ ...again, params: again.params.toString() }, { ...parsed, params: parsed.params.toString() }, value);
  }
});

t.test('the driver is given each host with its port, and credentials it cannot misread', async (t) => {
  t.equal(
    driverUrl('postgres://atrium:p@ss@db1:5433,db2/atrium?target_session_attrs=read-write'),
    'postgres://atrium:p%40ss@db1:5433,db2:5432/atrium?target_session_attrs=read-write',
    "a host without a port gets 5432, as libpq gives it, not the first host's",
  );
  t.equal(driverUrl('postgres://atrium:pw@db/atrium'), 'postgres://atrium:pw@db/atrium', 'one host: unchanged');
  t.equal(driverUrl('not a url'), 'not a url');
});
