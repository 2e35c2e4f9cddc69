/**
 * The rules of menu items: a link's system-variable placeholders, the forms a link may take
 * per type, whether a link may be embedded (the rule behind `iframe_access`, documented in
 * the spec, schema MenuItem), and which placeholders an author may use
 * (docs/permissions.md#entity-permissions).
 */
import type { Auth } from '../../platform/auth/auth.ts';
import { permissionsLacking, type Permission } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { coded, invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { navigationUrlProblems, urlForm, type UrlForm } from '../../platform/http/navigation-url.ts';
import type { SubjectLists } from '../entity-permissions/queries.ts';
import { missingSubjects } from '../entity-permissions/rules.ts';
import type { UserRow } from '../users/queries.ts';
import { fullName } from '../users/view.ts';
import { menuLanguage } from './queries.ts';
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

/**
 * Substitutes the caller's values, percent-encoded so that they cannot change the link's
 * structure (the spec, schema MenuItem): no value writes `/`, `?` or `#`, a path segment
 * that only a value made `.` or `..` is left empty, and a same-origin path that an empty
 * value would open with `//` opens with `/.//` (`keepPath`). A URL the values leave
 * without the form its template has (no host, or a host no URL may have) is no link: the
 * empty string (`keepForm`).
 */
export function resolveLink(template: string, user: UserRow): string {
  const resolved = template.replace(PLACEHOLDER, (_, name: string) => {
    // Own keys only: `{{constructor}}` or `{{__proto__}}` name no variable (a link stored before they were refused is empty there).
    const value = Object.hasOwn(LINK_VARIABLES, name) ? LINK_VARIABLES[name]!(user) : null;
    return encodeURIComponent(value === null || value === undefined ? '' : String(value));
  });
  if (resolved === template) return resolved;
  const sample = sampleOf(template);
  return keepForm(keepPath(resolved, sample), sample);
}

/**
 * `resolved`, or the empty string when it is an http(s) URL in the template (`sample`) but
 * not once resolved: a host the values left empty (a host of placeholders alone, stored
 * before `linkProblems` refused it), which browsers repair by taking the path's first
 * segment as the host (`https:///evil.example/x` opens evil.example), one the values left
 * as dots alone (a host of placeholders and dots, refused since as well: `https://./x`
 * names no host), or one holding a character no host may (a space). Such a link leads
 * nowhere the author wrote.
 */
function keepForm(resolved: string, sample: string): string {
  if (!/^https?:/i.test(sample)) return resolved;
  return urlForm(resolved) === urlForm(sample) && !hostOfDotsAlone(resolved) ? resolved : '';
}

/** Whether the host of URL `link` is dots alone, as URL parsers read it (`%2e` and the ideographic full stop are dots to them). */
function hostOfDotsAlone(link: string): boolean {
  try {
    return /^\.+$/.test(new URL(link).hostname);
  } catch {
    return false;
  }
}

/**
 * Whether the host of an http(s) URL `template` is its placeholders alone: read as URL
 * parsers read it, with every placeholder one value and then another, it holds nothing but
 * that value and dots. Dots are no part of a host the author chose: a trailing one names
 * the same host (`evil.example.`), and parsers read `%2e` and the ideographic full stop
 * as one too.
 */
function hostOfPlaceholdersAlone(template: string): boolean {
  if (!/^https?:/i.test(template)) return false;
  return ['a', 'b'].every((value) => {
    try {
      return new RegExp(`^[${value}.]+$`).test(new URL(template.replace(PLACEHOLDER, value)).hostname);
    } catch {
      return false;
    }
  });
}

/** The link as any caller would see it, structure-wise (placeholders stand for a neutral value). */
const sampleOf = (template: string) => template.replace(PLACEHOLDER, 'x');

/** A segment URL parsers read as "here" or "the parent" (`%2e` is a dot to them too). */
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

/** A link cut into what precedes its path (`scheme://authority`, or nothing for a same-origin path), the path, and the rest. */
function pathParts(link: string): { head: string; path: string; rest: string } | null {
  const head = link.startsWith('/') ? '' : /^https?:\/\/[^/?#]*/i.exec(link)?.[0];
  if (head === undefined) return null;
  const after = link.slice(head.length);
  const end = after.search(/[?#]/);
  return end < 0 ? { head, path: after, rest: '' } : { head, path: after.slice(0, end), rest: after.slice(end) };
}

/**
 * `resolved` with the path structure of `sample`, the same template with a neutral value
 * for each placeholder. Values are percent-encoded, so both have the same segments; a
 * segment that is a dot segment only in `resolved` came from a value and would move the
 * link up or in place: it is left empty. A same-origin path that then opens with `//`
 * would name another host: it opens with `/.` (`/.//x` is the path `//x` of the origin).
 */
function keepPath(resolved: string, sample: string): string {
  const link = pathParts(resolved);
  const model = pathParts(sample);
  if (!link || !model) return resolved;
  const modelSegments = model.path.split('/');
  const segments = link.path.split('/').map((segment, i) => (DOT_SEGMENT.test(segment) && !DOT_SEGMENT.test(modelSegments[i] ?? '') ? '' : segment));
  const path = segments.join('/');
  return `${link.head}${link.head === '' && path.startsWith('//') ? `/.${path}` : path}${link.rest}`;
}

/** What is wrong with `template` as the link of a `type` item; empty when it is fine. */
export function linkProblems(template: string, type: MenuItemType): string[] {
  const unknown = [...template.matchAll(PLACEHOLDER)].map((match) => match[1]!).filter((name) => !Object.hasOwn(LINK_VARIABLES, name));
  if (unknown.length > 0) {
    return [`unknown placeholders: ${unknown.join(', ')}; supported: ${Object.keys(LINK_VARIABLES).join(', ')}`];
  }
  if (/^\s*\{\{/.test(template)) return ['may not begin with a placeholder'];
  const sample = sampleOf(template);
  if (/\{\{|\}\}/.test(sample)) return ['contains a malformed placeholder'];
  const problems = navigationUrlProblems(sample, FORMS_BY_TYPE[type], `a ${type} item needs`);
  if (problems.length > 0) return problems;
  // The reader's value would be the whole host, and an empty one would leave none (`resolveLink` gives no link then).
  if (hostOfPlaceholdersAlone(template)) {
    return ["a URL's host may not be placeholders alone: a reader's empty value would leave the link without one"];
  }
  return [];
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

const READ_USERS: Permission[] = ['users.view'];
/**
 * What the author of a link must hold for each placeholder. A link resolves, for every
 * reader, to that reader's values and takes them to the link's target, which the author
 * chooses: so it may carry only user fields the author may read of other users
 * (`users.view`, plus the field's permission for personal and administrative fields).
 */
export const PLACEHOLDER_PERMISSIONS: Record<string, Permission[]> = {
  'user.id': READ_USERS,
  'user.username': READ_USERS,
  'user.first_name': READ_USERS,
  'user.last_name': READ_USERS,
  'user.full_name': READ_USERS,
  'user.lang_id': READ_USERS,
  'user.email': ['users.view', 'users.view-personal'],
  'user.staff_number': ['users.view', 'users.view-administrative'],
};
const STRICTEST: Permission[] = ['users.view', 'users.view-personal', 'users.view-administrative'];

/** The placeholders of `link` whose permissions `holder` lacks, with the permissions lacking. */
export function placeholderProblems(holder: Pick<Auth, 'permissions'>, link: string): string[] {
  const problems: string[] = [];
  for (const name of Object.keys(LINK_VARIABLES)) {
    const used = new RegExp(`\\{\\{\\s*${name.replace(/\./g, '\\.')}\\s*\\}\\}`).test(link);
    const lacking = used ? permissionsLacking(holder, PLACEHOLDER_PERMISSIONS[name] ?? STRICTEST) : [];
    if (lacking.length > 0) problems.push(`the placeholder ${name} needs ${lacking.join(' and ')}: it sends each reader's value to the link's target`);
  }
  return problems;
}

/** Whether `sent` names the same subjects as `current`, as sets (order and duplicates do not count; a missing list is empty). */
export function sameSubjects(sent: Partial<SubjectLists>, current: SubjectLists): boolean {
  const same = (x: number[] | undefined, y: number[]) => {
    const left = new Set(x ?? []);
    const right = new Set(y);
    return left.size === right.size && [...left].every((id) => right.has(id));
  };
  return same(sent.user_ids, current.user_ids) && same(sent.role_ids, current.role_ids) && same(sent.department_ids, current.department_ids);
}

/** A menu item as a create or update would store it, with what the update changes. */
export interface MenuItemDraft {
  type: MenuItemType;
  link: string;
  /** Undefined: the tenant's system language. */
  langId: string | undefined;
  entityPermissions: Partial<SubjectLists> | undefined;
  /** On an update, the lists the item holds now (a deleted user they name may stay named). */
  storedEntityPermissions?: SubjectLists;
  /** Whether the link is new (create, or changed by an update): its placeholders are then checked against the author. */
  newLink: boolean;
  /** Whether the type is new (create, or changed by an update): the link's form is then judged for it, as for a new link. */
  newType: boolean;
  /**
   * Whether an update changes who sees the item (its entity permissions): the link's
   * placeholders are then checked against the caller too, since the new audience is sent
   * to the link's target with its values.
   */
  newAudience: boolean;
}

/**
 * The draft's problems that need no data: the link suits the type, and a link that is new,
 * or whose audience changes, carries only placeholders the caller may read (the same rule
 * for both: each decides whose values go to the link's target).
 */
export function menuItemDraftErrors(caller: Pick<Auth, 'permissions'>, draft: MenuItemDraft): FieldErrors {
  const errors: FieldErrors = {};
  // A link kept as it is, for the same type, is not judged again (a rule made since it was stored would leave the
  // item's other keys uneditable); its placeholders still are when its audience changes.
  const linkErrors = draft.newLink || draft.newType ? linkProblems(draft.link, draft.type) : [];
  const placeholders = linkErrors.length === 0 && (draft.newLink || draft.newAudience) ? placeholderProblems(caller, draft.link) : [];
  const link = [
    ...linkErrors.map((problem) => coded('format', problem)),
    ...(draft.newLink ? placeholders.map((problem) => coded('permission_missing', problem)) : []),
  ];
  if (link.length > 0) errors.link = link;
  if (draft.newAudience && placeholders.length > 0) {
    errors.entity_permissions = [
      coded(
        'permission_missing',
        `who sees this item can be changed only by a caller who may read every user field its link sends: ${placeholders.join('; ')}`,
      ),
    ];
  }
  return errors;
}

/**
 * Checks the draft (`menuItemDraftErrors`) and what needs the tenant's data: the language
 * exists (or the tenant has a system language to default to), the entity-permission ids
 * name records of the tenant. All problems at once, as one 422. Returns the language to store.
 */
export async function validateMenuItemDraft(tx: Tx, caller: Pick<Auth, 'permissions'>, draft: MenuItemDraft): Promise<string> {
  const errors = menuItemDraftErrors(caller, draft);
  const language = await menuLanguage(tx, draft.langId);
  if (!language) {
    errors.lang_id = [
      draft.langId === undefined
        ? coded('required', 'is required: the tenant has no system language')
        : coded('missing_reference', `no language "${draft.langId}" exists`),
    ];
  }
  if (draft.entityPermissions) Object.assign(errors, await missingSubjects(tx, draft.entityPermissions, 'entity_permissions', draft.storedEntityPermissions));
  if (Object.keys(errors).length > 0) throw invalid(errors);
  return language!;
}
