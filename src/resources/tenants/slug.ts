/**
 * A tenant's slug, the name clients sign in with: lower-case letters, digits and dashes, at
 * most 63 characters, starting and ending with a letter or digit. One rule for `createTenant`
 * and for the configuration that names a first tenant (`ATRIUM_BOOTSTRAP_TENANT`).
 */
export const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
