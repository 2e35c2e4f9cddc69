import { asc } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { notificationSettings } from './table.ts';

type NotificationSettingRow = typeof notificationSettings.$inferSelect;

export const notificationSettingView = defineView<NotificationSettingRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    key: {},
    sort_number: { value: (row) => row.sortNumber },
  },
});

/** The tenant's notification settings, by `sort_number`, then `id`. */
export const notificationSettingListing: Listing<NotificationSettingRow, Auth> = {
  view: notificationSettingView,
  query: (tx) => tx.select().from(notificationSettings),
  tenant: notificationSettings.tenantId,
  order: [asc(notificationSettings.sortNumber), asc(notificationSettings.id)],
};
