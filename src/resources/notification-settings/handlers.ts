import { asc, eq } from 'drizzle-orm';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import { notificationSettings } from './table.ts';
import { notificationSettingView } from './view.ts';

export const notificationSettingHandlers = {
  async listNotificationSettings({ auth, query, services: { db } }) {
    const controls = readControls(notificationSettingView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx
        .select()
        .from(notificationSettings)
        .where(controls.where)
        .orderBy(asc(notificationSettings.sortNumber), asc(notificationSettings.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(notificationSettingView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getNotificationSetting({ auth, query, params, services: { db } }) {
    const controls = readControls(notificationSettingView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      const rows = await tx.select().from(notificationSettings).where(eq(notificationSettings.id, params.notificationSetting));
      if (rows.length === 0) throw notFound('The notification setting');
      return present(notificationSettingView, tx, rows, controls, auth);
    });
    return { status: 200, body: body! };
  },
} satisfies Partial<Handlers>;
