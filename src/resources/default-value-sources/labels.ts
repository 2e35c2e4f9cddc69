import { eq } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { users } from '../users/table.ts';

/** Labels in the caller's language (`users.lang_id`); English when unset or not translated. */
const LABELS = {
  'en-US': {
    form: 'Form',
    taskTemplate: 'Task template',
    text: 'Search',
    form_type: 'Form type',
    form_id: 'Form',
    task_template_id: 'Task template',
    parent_type: 'Parent type',
    field_type: 'Field type',
    compatible_with_form_field_id: 'Compatible with field',
  },
  'de-DE': {
    form: 'Formular',
    taskTemplate: 'Aufgabenvorlage',
    text: 'Suche',
    form_type: 'Formulartyp',
    form_id: 'Formular',
    task_template_id: 'Aufgabenvorlage',
    parent_type: 'Übergeordneter Typ',
    field_type: 'Feldtyp',
    compatible_with_form_field_id: 'Passend zu Feld',
  },
} as const;

export type LabelKey = keyof (typeof LABELS)['en-US'];
export type Labels = Record<LabelKey, string>;

export async function labelsFor(tx: Tx, auth: Auth): Promise<Labels> {
  const [row] = await tx.select({ langId: users.langId }).from(users).where(eq(users.id, auth.userId));
  const lang = row?.langId ?? 'en-US';
  return lang in LABELS ? LABELS[lang as keyof typeof LABELS] : LABELS['en-US'];
}
