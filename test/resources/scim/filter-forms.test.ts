/**
 * The SCIM user list prepares one statement per filter form (the filter but for its values)
 * and gives each request's values to it: every value a filter compares must therefore go
 * behind a placeholder. A value written into the condition would be kept in the prepared
 * statement and answer later requests of the same form with the first request's value.
 */
import { Placeholder } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import t from 'tap';
import { parseFilter, placeholders, USER_ATTRIBUTES } from '../../../src/resources/scim/users.ts';

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
          condition = parseFilter(filter, USER_ATTRIBUTES, bound.bind);
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
    const { params } = dialect.sqlToQuery(parseFilter(filter, USER_ATTRIBUTES, bound.bind)!);
    t.ok(
      params.every((param) => param instanceof Placeholder),
      filter,
    );
  }
});
