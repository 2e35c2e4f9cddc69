/**
 * The SCIM user list prepares one statement per filter form (the filter but for its values)
 * and gives each request's values to it: every value a filter compares must therefore go
 * behind a placeholder. A value written into the condition would be kept in the prepared
 * statement and answer later requests of the same form with the first request's value.
 * The statements are told apart by `filterForm`, which must therefore give two filters the
 * same form only when their conditions read alike but for their values.
 */
import { Placeholder } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import t from 'tap';
import { filterCondition, filterForm, parsedFilter, placeholders, USER_ATTRIBUTES } from '../../../src/resources/scim/users.ts';

const dialect = new PgDialect();
const OPERATORS = ['eq', 'ne', 'co', 'sw', 'ew', 'gt', 'ge', 'lt', 'le'];
const VALUES = ['"Ann"', '"12"', '"not a number"', '"2026-01-31T08:00:00Z"', 'true', 'null'];

t.test('every comparison of every User attribute puts its value behind a placeholder', async (t) => {
  let forms = 0;
  for (const attribute of Object.keys(USER_ATTRIBUTES)) {
    for (const op of OPERATORS) {
      for (const value of VALUES) {
        const filter = `${attribute} ${op} ${value} and not (${attribute} ${op} ${value})`;
        const bound = placeholders();
        let condition;
        try {
          condition = filterCondition(parsedFilter(filter)!, USER_ATTRIBUTES, null, bound.bind);
        } catch {
          continue; // refused as invalidFilter: no statement
        }
        forms++;
        const { params } = dialect.sqlToQuery(condition!);
        const written = params.filter((param) => !(param instanceof Placeholder));
        if (written.length > 0) t.fail(`${filter}: values written into the condition: ${JSON.stringify(written)}`);
        t.same(
          params.map((param) => bound.values[(param as Placeholder).name!] !== undefined),
          params.map(() => true),
          `${filter}: every placeholder has its value`,
        );
      }
    }
  }
  t.ok(forms > 300, `${forms} filters checked`);
});

t.test('a value path and pr put their values behind placeholders too', async (t) => {
  for (const filter of ['emails[type eq "work" and value co "@example"]', 'externalId pr and userName sw "a"', 'externalId ne "x"', 'externalId eq "x"']) {
    const bound = placeholders();
    const { params } = dialect.sqlToQuery(filterCondition(parsedFilter(filter)!, USER_ATTRIBUTES, null, bound.bind));
    t.ok(params.length > 0 && params.every((param) => param instanceof Placeholder), filter);
  }
});

t.test('filters of one form (filterForm) make the same SQL text, whatever their values', async (t) => {
  // Several values of each kind that filterForm tells apart: text, decimal text, booleans, null.
  const values = ['"Ann"', '"bob@example.com"', '"2026-01-31T08:00:00Z"', '"2027-02-28T23:59:59Z"', '"12"', '"345"', '"0"', '"-1"', 'true', 'false', 'null'];
  const shapes = (a: string, op: string, v: string) => [`${a} ${op} ${v}`, `not (${a} ${op} ${v}) and userName pr`, `${a} ${op} ${v} or externalId eq ${v}`];
  const textOf = new Map<string, { filter: string; text: string }>();
  let compared = 0;
  for (const attribute of Object.keys(USER_ATTRIBUTES)) {
    for (const op of OPERATORS) {
      for (const value of values) {
        for (const filter of shapes(attribute, op, value)) {
          const parsed = parsedFilter(filter)!;
          let text: string;
          try {
            text = dialect.sqlToQuery(filterCondition(parsed, USER_ATTRIBUTES, null, placeholders().bind)).sql;
          } catch {
            continue; // refused as invalidFilter
          }
          const form = filterForm(parsed);
          const first = textOf.get(form);
          if (!first) textOf.set(form, { filter, text });
          else {
            compared++;
            if (first.text !== text) t.fail(`${filter} and ${first.filter} share a form but not their SQL`);
          }
        }
      }
    }
  }
  for (const filter of ['emails[type eq "work" and value co "@a"]', 'emails[type eq "home" and value co "@b.example"]']) {
    const parsed = parsedFilter(filter)!;
    const text = dialect.sqlToQuery(filterCondition(parsed, USER_ATTRIBUTES, null, placeholders().bind)).sql;
    const first = textOf.get(filterForm(parsed));
    if (first) t.equal(text, first.text, `${filter}: the same SQL as ${first.filter}`);
    else textOf.set(filterForm(parsed), { filter, text });
  }
  t.ok(compared > 1000, `${compared} filters compared with another of their form`);
  const none = filterForm(undefined);
  t.not(none, filterForm(parsedFilter('userName pr')), 'no filter is not the form of a filter matching every user');
  t.notOk(textOf.has(none), `no filter is a form of its own, none of the ${textOf.size} forms above`);
  t.not(filterForm(parsedFilter('id eq "12"')), filterForm(parsedFilter('id eq "x"')), 'a decimal id and other text are different forms');
});
