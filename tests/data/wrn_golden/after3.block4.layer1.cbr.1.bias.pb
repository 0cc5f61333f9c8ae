Bafter3.block4.layer1.cbr.1.biasJ07¯Ì9j9#I¹;“Š8şÖÇ¹ÅUš9õ.:YF¸²¼‰¸
¬Ÿ¹!:Ã·d9