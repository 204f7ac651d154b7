<?php
// The test oracle's second half: what Phorge records of the raw buffer that `curl -i` wrote, in PHP's own
// regular expressions and gzdecode(). Written from arcanist's HTTPSFuture (a followed redirect's header
// block dropped up to its CRLFCRLF) and BaseHTTPFuture::parseRawHTTPResponse (100 and "200 Connection
// established" blocks skipped, a gzip body decoded, anything else that does not fit: Parse error 1).
// Usage: php phorge_parse.php RAW_FILE REDIRECTS; prints "http <errorCode>".

function phorge_status($raw, $redirects) {
  $rest = preg_replace('/^(.*\r\n\r\n){'.$redirects.'}/sU', '', $raw);
  for (;;) {
    if (!preg_match("@^(?P<head>.*?)\r?\n\r?\n(?P<body>.*)$@s", $rest, $block)) {
      return 1;
    }
    $rex = "@^HTTP/\S+ (?P<code>\d+) ?(?P<status>.*?)(?:\r?\n(?P<headers>.*))?$@s";
    if (!preg_match($rex, $block['head'], $line)) {
      return 1;
    }
    $code = (int)$line['code'];
    $interim = ($code == 100)
      || ($code == 200 && strtolower($line['status']) == 'connection established');
    $rest = $block['body'];
    if (!$interim) {
      break;
    }
  }
  $encoding = null;
  $fields = isset($line['headers']) ? $line['headers'] : null;
  if ($fields) {
    foreach (preg_split("/\r?\n/", $fields) as $field) {
      $name = $field;
      $value = null;
      if (preg_match('@^(?P<name>.*?):\s*(?P<value>.*)$@', $field, $parts)) {
        $name = $parts['name'];
        $value = $parts['value'];
      }
      if (!strcasecmp($name, 'Content-Encoding')) {
        $encoding = $value;
        break;
      }
    }
  }
  if ($encoding == 'gzip' && @gzdecode($rest) === false) {
    return 1;
  }
  return $code;
}

echo 'http '.phorge_status(file_get_contents($argv[1]), (int)$argv[2])."\n";
