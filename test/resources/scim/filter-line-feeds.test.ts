/**
 * A line feed in a compared text of a SCIM filter. scim2-parse-filter's tokenizer reads a
 * string literal with a pattern in which a line feed matches two ways, so a literal left
 * unclosed takes time doubling with each line feed in it: 24 held the process for a tenth
 * of a second, and a filter may have 2000 characters. No compared text can hold a line feed
 * (a JSON string escapes it), so such a filter was always malformed: it is refused before
 * the tokenizer reads it, and that is what these tests check (the refusal names the line
 * feed, which the tokenizer's own errors do not). A line feed between the parts of a filter
 * stays a blank, as the tokenizer reads it.
 */
import t from 'tap';
import { parsedFilter } from '../../../src/resources/scim/users.ts';

/** What `parsedFilter` throws for `filter`, or null. */
function refusal(filter: string): unknown {
  try {
    parsedFilter(filter);
    return null;
  } catch (error) {
    return error;
  }
}

const NAMES_THE_LINE_FEED = { status: 400, scimType: 'invalidFilter', message: /line feed/ };

t.test('a compared text holding a line feed is refused as malformed, naming it', async (t) => {
  for (const filter of [
    'userName eq "a\nb"',
    'userName eq "\n',
    'userName eq "\n\n\n\\"',
    'userName eq "a" or externalId eq "\n\n',
    'emails[value eq "\n"]',
    'userName eq "a\\\n"',
  ]) {
    t.match(refusal(filter), NAMES_THE_LINE_FEED, JSON.stringify(filter));
  }
});

t.test('an unclosed text of line feeds as long as a filter may be is refused the same way', async (t) => {
  const filter = `userName eq "${'\n'.repeat(2000 - 'userName eq "'.length)}`;
  t.equal(filter.length, 2000);
  t.match(refusal(filter), NAMES_THE_LINE_FEED);
});

t.test('line feeds outside compared texts are blanks; other filters read as before', async (t) => {
  t.match(parsedFilter('userName eq "a"\nand\n\nactive eq true'), {
    op: 'and',
    filters: [
      { op: 'eq', compValue: 'a' },
      { op: 'eq', compValue: true },
    ],
  });
  t.match(parsedFilter('userName eq "a\\"\\n"'), { op: 'eq', compValue: 'a"\\n' }, 'an escaped quote and a backslash before n are no line feed');
  t.match(refusal('userName eq "a\rb"'), { status: 400, scimType: 'invalidFilter', message: /not json/ }, 'a carriage return is malformed, as before');
});
