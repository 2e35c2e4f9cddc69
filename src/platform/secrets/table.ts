import { pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * Keys of this installation (not of a tenant): generated once on first use and shared by
 * every process on the database. Read only by the owner role.
 */
export const instanceSecrets = pgTable('instance_secrets', {
  name: text('name').primaryKey(),
  value: text('value').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});
