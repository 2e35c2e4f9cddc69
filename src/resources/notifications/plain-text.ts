/**
 * Plain text of a stored (sanitized) HTML notification body: for the text part of e-mail
 * copies and the body of push messages, which browsers show as text.
 */
export const plainText = (html: string) =>
  html
    .replace(/<br\s*\/?>|<\/p>|<\/li>|<\/h\d>/gi, '\n')
    .replace(/<[^<>]*>/g, '')
    .replace(/&nbsp;/g, ' ')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&amp;/g, '&')
    .trim();
