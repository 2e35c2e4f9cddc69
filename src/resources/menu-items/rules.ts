/**
 * Menu item links: system-variable placeholders, the forms a link may take per type, and
 * whether a link may be embedded (the rule behind `iframe_access`, documented in
 * openapi/components/menu-items.yaml#/MenuItem).
 */
import { navigationUrlProblems, urlForm, type UrlForm } from '../../platform/http/navigation-url.ts';
import type { UserRow } from '../users/queries.ts';
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

const FORMS_BY_TYPE: Record<MenuItemType, UrlForm[]> = {
  link: ['https', 'http', 'path', 'mailto', 'tel'],
  iframe: ['https', 'http', 'path'],
  route: ['path'],
};

/** Substitutes the caller's values, percent-encoded so that they cannot change the link's structure. */
export function resolveLink(template: string, user: UserRow): string {
  return template.replace(PLACEHOLDER, (_, name: string) => {
    const value = LINK_VARIABLES[name]?.(user);
    return encodeURIComponent(value === null || value === undefined ? '' : String(value));
  });
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
  return navigationUrlProblems(sample, FORMS_BY_TYPE[type], `a ${type} item needs`);
}

/** "May be embedded": an https: URL or a same-origin path (http would be mixed content). */
export function embeddable(link: string): boolean {
  const form = urlForm(link);
  return form === 'https' || form === 'path';
}

/** The stored `iframe_access`, recalculated whenever the link or the preference changes. */
export function iframeAccess(allowIframeAccess: boolean, template: string): boolean {
  return allowIframeAccess && embeddable(sampleOf(template));
}
