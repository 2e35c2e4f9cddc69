import type { Auth } from '../../platform/auth/auth.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import type { notificationSettings } from './table.ts';

export const notificationSettingView = defineView<typeof notificationSettings.$inferSelect, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    key: {},
    sort_number: { value: (row) => row.sortNumber },
  },
});
