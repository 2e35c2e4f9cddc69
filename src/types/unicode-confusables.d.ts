/**
 * The part of unicode-confusables that Atrium uses. The package ships its declarations as
 * `index.ts.d`, a name TypeScript does not find, so they are repeated here.
 */
declare module 'unicode-confusables' {
  /** `input` with every character Unicode's confusables.txt (UTS #39) lists replaced by its prototype; zero-width characters dropped. */
  export function rectifyConfusion(input: string): string;
}
