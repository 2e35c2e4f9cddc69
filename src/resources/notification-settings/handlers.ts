import { eq } from 'drizzle-orm';
import type { Handlers } from '../../platform/http/handler.ts';
import { listRecords, showRecord } from '../../platform/result-controls/listing.ts';
import { notificationSettings } from './table.ts';
import { notificationSettingListing } from './view.ts';

export const notificationSettingHandlers = {
  async listNotificationSettings({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, notificationSettingListing, query, auth) };
  },

  async getNotificationSetting({ auth, query, params, services: { db } }) {
    const which = eq(notificationSettings.id, params.notificationSetting);
    return { status: 200, body: await showRecord(db, auth.tenantId, notificationSettingListing, query, auth, which, 'The notification setting') };
  },
} satisfies Partial<Handlers>;
