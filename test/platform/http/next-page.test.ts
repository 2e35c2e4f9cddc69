/**
 * The next-page link of paged lists (docs/api-conventions.md#paging) without HTTP: the
 * mark a list carries, and the `Link` value built from the request's own URL.
 */
import t from 'tap';
import { nextPageLink, nextPageOf, withNextPage } from '../../../src/platform/http/next-page.ts';

t.test('only a marked answer has a next page', async (t) => {
  const records = [{ id: 1 }];
  t.equal(withNextPage(records, { offset: 1 }), records, 'the answer itself, unchanged');
  t.strictSame(records, [{ id: 1 }]);
  t.strictSame(nextPageOf(records), { offset: 1 });
  t.equal(nextPageOf([{ id: 1 }]), undefined, 'an equal array is not marked');
  for (const other of [undefined, null, 0, 'text', {}]) t.equal(nextPageOf(other), undefined);
  t.same(JSON.parse(JSON.stringify(records)), [{ id: 1 }], 'the mark is not serialized');
});

t.test('the link keeps the path and the other parameters as sent, replacing the position', async (t) => {
  t.equal(nextPageLink('/api/users?limit=2', { offset: 2 }), '</api/users?limit=2&offset=2>; rel="next"');
  t.equal(nextPageLink('/api/users?offset=4&limit=2&selects=id', { offset: 6 }), '</api/users?limit=2&selects=id&offset=6>; rel="next"');
  t.equal(
    nextPageLink('/api/users?filter%5Btext%5D=a%20b&filter[active]=true&limit=1', { offset: 1 }),
    '</api/users?filter%5Btext%5D=a%20b&filter[active]=true&limit=1&offset=1>; rel="next"',
    'encoded and plain brackets are left as the client wrote them',
  );
  t.equal(
    nextPageLink('/api/notifications?limit=3&offset=3&before_id=a', { before_id: 'b', offset: undefined }),
    '</api/notifications?limit=3&before_id=b>; rel="next"',
    'undefined removes a parameter',
  );
  t.equal(
    nextPageLink('/api/users?limit=1&off%73et=9&&', { offset: 1 }),
    '</api/users?limit=1&offset=1>; rel="next"',
    'a percent-encoded name is the same parameter',
  );
  t.equal(nextPageLink('/api/users?limit=1&%zz=1', { offset: 1 }), '</api/users?limit=1&%zz=1&offset=1>; rel="next"', 'a malformed name is kept');
  t.equal(
    nextPageLink('/api/users?limit=1&offset[]=0&offset%5B0%5D=0', { offset: 1 }),
    '</api/users?limit=1&offset=1>; rel="next"',
    'the bracket spellings the parser reads as the same parameter are replaced too',
  );
  t.equal(
    nextPageLink('/api/users?limit=1&[offset]=0&%5Boffset%5D=0&[offset][]=0', { offset: 1 }),
    '</api/users?limit=1&offset=1>; rel="next"',
    'so is a name in brackets of its own, which the parser reads as the name',
  );
  t.equal(nextPageLink('/api/users', { offset: 1 }), '</api/users?offset=1>; rel="next"');
});

t.test('what the client sent cannot break out of the <…> of the header', async (t) => {
  const link = nextPageLink('/api/users?limit=1&selects=<a>," é\u00ff', { offset: 1 });
  t.equal(link, '</api/users?limit=1&selects=%3Ca%3E,%22%20%E9%FF&offset=1>; rel="next"');
  t.match(link, /^<[\x21-\x7e]*>; rel="next"$/);
});
