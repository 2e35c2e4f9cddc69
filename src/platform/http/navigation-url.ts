/**
 * The one rule for URLs that a client opens or navigates to on a user's behalf (menu item
 * links, a user's `default_route`, a notification's `url`): which forms a URL may take,
 * so that no stored value can run script (`javascript:`, `data:`, `vbscript:`…) or
 * silently lead to another host.
 */

/** The forms a navigation target may take; each use names the ones it accepts. */
export type UrlForm = 'https' | 'http' | 'path' | 'mailto' | 'tel';

export const URL_FORM_NAMES: Record<UrlForm, string> = {
  https: 'an https: URL',
  http: 'an http: URL',
  path: 'a same-origin path starting with a single /',
  mailto: 'a mailto: address',
  tel: 'a tel: number',
};

/**
 * Whitespace, backslashes and control characters: browsers strip or reinterpret them
 * (`/\host` and `/<TAB>/host` both become `//host`, another host).
 */
// eslint-disable-next-line no-control-regex -- control characters are what it refuses
const UNSAFE_CHARACTERS = /[\s\\\u0000-\u001f\u007f]/;

export const UNSAFE_CHARACTERS_PROBLEM = 'may not contain whitespace, backslashes or control characters';

export const hasUnsafeUrlCharacters = (url: string) => UNSAFE_CHARACTERS.test(url);

/**
 * The form of `url`, or null when it has none of them: a path starting with a single `/`,
 * an absolute http(s) URL whose host is written right after `//` (with no user name or
 * password before it), a mailto: address or a tel: number.
 */
export function urlForm(url: string): UrlForm | null {
  if (url.startsWith('/')) return url.startsWith('//') ? null : 'path';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.protocol === 'https:' || parsed.protocol === 'http:') {
    // Parsers repair what is not `scheme://host`: `https:host` and `https:///host` both
    // open `host`, and `https://intranet@host` opens `host` too, looking like another one.
    // Only the plain form is accepted, so the host a reader sees is the host opened.
    const authority = /^https?:\/\/([^/?#]*)/i.exec(url)?.[1];
    if (!parsed.hostname || !authority || authority.includes('@')) return null;
    return parsed.protocol === 'https:' ? 'https' : 'http';
  }
  if (parsed.protocol === 'mailto:') return 'mailto';
  if (parsed.protocol === 'tel:') return 'tel';
  return null;
}

/** What is wrong with `url` as a target of one of the `allowed` forms; empty when it is fine. */
export function navigationUrlProblems(url: string, allowed: readonly UrlForm[], subject = 'must be'): string[] {
  if (hasUnsafeUrlCharacters(url)) return [UNSAFE_CHARACTERS_PROBLEM];
  const form = urlForm(url);
  if (!form || !allowed.includes(form)) return [`${subject} ${allowed.map((f) => URL_FORM_NAMES[f]).join(', or ')}`];
  return [];
}

/** The forms of a place to open after sign-in (a user's `default_route`) or from a notification (`url`). */
export const ROUTE_FORMS: readonly UrlForm[] = ['path', 'https', 'http'];
