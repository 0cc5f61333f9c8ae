
Bafter3.fc.biasJ(+N>£>•Ü½Á.o>d´
>*?½9½Bor¾þ¦!¾_5§<