/**
 * Menu item links: system-variable placeholders, the forms a link may take per type, and
 * whether a link may be embedded (the rule behind `iframe_access`, documented in
 * openapi/components/menu-items.yaml#/MenuItem).
 */
import type { UserRow } from '../users/view.ts';
import { fullName } from '../users/view.ts';
import type { MenuItemType } from './table.ts';

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_.]+)\s*\}\}/g;

/** The system variables a link may use, resolved for the calling user. */
export const LINK_VARIABLES: Record<string, (user: UserRow) => string | number | null> = {
  'user.id': (user) => user.id,
  'user.username': (user) => user.username,
  'user.first_name': (user) => user.firstName,
  'user.last_name': (user) => user.lastName,
  'user.full_name': (user) => fullName(user),
  'user.email': (user) => user.email,
  'user.staff_number': (user) => user.staffNumber,
  'user.lang_id': (user) => user.langId,
};

type LinkForm = 'https' | 'http' | 'path' | 'mailto' | 'tel';

const FORMS_BY_TYPE: Record<MenuItemType, LinkForm[]> = {
  link: ['https', 'http', 'path', 'mailto', 'tel'],
  iframe: ['https', 'http', 'path'],
  route: ['path'],
};

const FORM_NAMES: Record<LinkForm, string> = {
  https: 'an https: URL',
  http: 'an http: URL',
  path: 'a same-origin path starting with a single /',
  mailto: 'a mailto: address',
  tel: 'a tel: number',
};

/** Substitutes the caller's values, percent-encoded so that they cannot change the link's structure. */
export function resolveLink(template: string, user: UserRow): string {
  return template.replace(PLACEHOLDER, (_, name: string) => {
    const value = LINK_VARIABLES[name]?.(user);
    return encodeURIComponent(value === null || value === undefined ? '' : String(value));
  });
}

function formOf(link: string): LinkForm | null {
  if (link.startsWith('/')) return link.startsWith('//') ? null : 'path';
  let url: URL;
  try {
    url = new URL(link);
  } catch {
    return null;
  }
  if (url.protocol === 'https:' || url.protocol === 'http:') return url.hostname ? (url.protocol === 'https:' ? 'https' : 'http') : null;
  if (url.protocol === 'mailto:') return 'mailto';
  if (url.protocol === 'tel:') return 'tel';
  return null;
}

/** The link as any caller would see it, structure-wise (placeholders stand for a neutral value). */
const sampleOf = (template: string) => template.replace(PLACEHOLDER, 'x');

/** What is wrong with `template` as the link of a `type` item; empty when it is fine. */
export function linkProblems(template: string, type: MenuItemType): string[] {
  const unknown = [...template.matchAll(PLACEHOLDER)].map((match) => match[1]!).filter((name) => !(name in LINK_VARIABLES));
  if (unknown.length > 0) {
    return [`unknown placeholders: ${unknown.join(', ')}; supported: ${Object.keys(LINK_VARIABLES).join(', ')}`];
  }
  if (/^\s*\{\{/.test(template)) return ['may not begin with a placeholder'];
  const sample = sampleOf(template);
  if (/\{\{|\}\}/.test(sample)) return ['contains a malformed placeholder'];
  // Backslashes and blanks are read differently by browsers (`/\host` = `//host`).
  if (/[\s\\\u0000-\u001f\u007f]/.test(sample)) return ['may not contain whitespace, backslashes or control characters'];
  const form = formOf(sample);
  const allowed = FORMS_BY_TYPE[type];
  if (!form || !allowed.includes(form)) return [`a ${type} item needs ${allowed.map((f) => FORM_NAMES[f]).join(', or ')}`];
  return [];
}

/** "May be embedded": an https: URL or a same-origin path (http would be mixed content). */
export function embeddable(link: string): boolean {
  const form = formOf(link);
  return form === 'https' || form === 'path';
}

/** The stored `iframe_access` (seed: recalculated whenever link or preference changes). */
export function iframeAccess(allowIframeAccess: boolean, template: string): boolean {
  return allowIframeAccess && embeddable(sampleOf(template));
}
