import ipaddr from 'ipaddr.js';

/**
 * The client a per-address count belongs to (the general rate limit, sign-in counts): an
 * IPv4 address (IPv4-mapped IPv6 included) as it is, an IPv6 address by its /64 network —
 * one subscriber commonly holds a whole /64 and could otherwise rotate through it, one
 * address per request.
 */
export function clientOf(ip: string): string {
  if (!ipaddr.isValid(ip)) return ip;
  const address = ipaddr.process(ip);
  if (address.kind() === 'ipv4') return address.toString();
  const parts = (address as ipaddr.IPv6).parts.slice(0, 4);
  return `${new ipaddr.IPv6([...parts, 0, 0, 0, 0]).toString()}/64`;
}
